"""What benches read of their processes (memory and CPU time, from /proc) and how they
report several runs (median and spread)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"process {pid} has no VmRSS")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone since the listing
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def cpu_ms(pid: int, *, with_children: bool = False) -> float:
    """User + system CPU time of the process so far (and of its live children: a Celery
    worker's pool), in ms; the kernel counts in ticks of 1/TICKS s."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / TICKS * 1000
    return own + (sum(cpu_ms(child, with_children=True) for child in children(pid)) if with_children else 0.0)


def machine_busy_ms() -> float:
    """CPU time the whole machine spent not idle (every core, every process), in ms."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / TICKS * 1000


def spread(values: list[float], digits: int = 2) -> str:
    """``median (lowest-highest)`` of the runs."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
