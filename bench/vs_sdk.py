"""tools/call echo: Toolbay against the official MCP SDK server, same load client, same run.

    make bench BENCH=vs_sdk [BENCH_ARGS="--sessions 1 8 32 --seconds 5 --runs 3"]

Rows, each one uvicorn process (uvloop, httptools) on loopback:
- ``toolbay``: the production configuration (README, compose): DEBUG=0, PostgreSQL
  (BENCH_DATABASE_URL, dropped and recreated), the audit writer running, call limits set on
  the tenant (so the limit counters run), access log as its setting has it (off);
- ``sdk``: ``bench/sdk_server.py``, the official ``mcp`` SDK's ``MCPServer`` with the same
  echo tool, ``json_response=True``, access log off;
- ``make-run``: ``make run``'s defaults: DEBUG=1, a SQLite file, the audit writer, access log on.

Auth, argument validation, limits and audit are on in every Toolbay row. Each session is one
keep-alive connection with its own MCP session, calling back to back (``bench/loadgen.py``);
the servers take turns, never overlap, and the ratios are against the SDK of the same run
because the 2-core machine's absolute numbers move from minute to minute. Each size is
measured in ``--runs`` (3) alternating runs (the SDK first in every other one); the summary
line gives each figure and ratio as the median of the runs with the lowest and highest.

``cpu`` is the CPU time (user + system, from /proc on Linux) the server's processes spent
per request: for Toolbay the web process and its audit writer. It moves far less than the
throughput when other work shares the machine. ``database`` (the ``toolbay`` row) is the CPU
time of the PostgreSQL backends of the bench's database per request, the audit writer's
inserts mostly: the SDK writes nothing, and on one machine that work shares its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.background_bench import BENCH_DATABASE_URL, recreate_database
from bench.echo_bench import BENCH_REDIS, ECHO, ROOT, free_port, production_settings, server_command, wait_for_port
from bench.loadgen import LoadResult, run_load
from bench.measure import spread

LIMITS = """
from tenants.models import Tenant
Tenant.objects.filter(slug="demo").update(calls_per_minute=100_000_000, max_concurrent_calls=100_000)
"""


Measured = tuple[LoadResult, float | None, float | None]  # result, cpu and database µs per request


class Deployment:
    """A Toolbay server, its audit writer and a key, on a database of its own."""

    def __init__(self, name: str, env: dict[str, str], *, audit_writer: bool = True) -> None:
        self.name = name
        self.env = env
        self.audit_writer = audit_writer
        self.processes: list[subprocess.Popen[bytes]] = []
        self.url = ""
        self.urls: list[str] = []
        self.key = ""

    def prepare(self) -> None:
        manage = [sys.executable, "manage.py"]
        run = {"cwd": ROOT, "env": self.env, "check": True}
        subprocess.run([*manage, "migrate", "-v", "0"], **run)
        subprocess.run([*manage, "seed_demo"], **run, stdout=subprocess.DEVNULL)
        subprocess.run([*manage, "shell", "-c", LIMITS], **run)
        out = subprocess.run(
            [*manage, "create_api_key", "demo", "--name", f"bench-{time.time_ns()}"],
            **run,
            capture_output=True,
            text=True,
        ).stdout
        self.key = out.strip().splitlines()[-1]

    def start(self, servers: int = 1) -> None:
        """``servers`` uvicorn processes (each on its own port, ``urls``) and one audit writer."""
        ports = [free_port() for _ in range(servers)]
        commands = [
            server_command("uvicorn", "mcp_platform.asgi:application", port, access_log=True) for port in ports
        ]  # ACCESS_LOG
        if self.audit_writer:
            commands.append([sys.executable, "manage.py", "audit_writer"])
        for command in commands:
            self.processes.append(
                subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        for port in ports:
            wait_for_port(port)
        self.urls = [f"http://127.0.0.1:{port}/mcp/demo" for port in ports]
        self.url = self.urls[0]

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(20)
        self.processes.clear()


def cpu_seconds(pids: list[int]) -> float | None:
    """User + system CPU time of these processes so far; None where /proc is not there."""
    total = 0.0
    try:
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return total


class DatabaseCpu:
    """The CPU time of the PostgreSQL backends serving the bench's database (the audit
    writer's inserts, mostly), where the server runs on this machine: the part of a call's
    cost that ``cpu`` (the server's own processes) does not see."""

    def __init__(self) -> None:
        self._conn = psycopg.connect(BENCH_DATABASE_URL, autocommit=True)
        self._start: dict[int, float] = {}

    def _backends(self) -> dict[int, float]:
        pids = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return {pid: seconds for (pid,) in pids if (seconds := cpu_seconds([pid])) is not None}

    def start(self) -> None:
        self._start = self._backends()

    def seconds(self) -> float:
        """Since ``start``. The window is the load's, warm-up included: the rows of its last
        linger (AUDIT_WRITER_LINGER_MS, 0.2 s of a 6 s load) are written after it."""
        return sum(now - self._start.get(pid, 0.0) for pid, now in self._backends().items())

    def close(self) -> None:
        self._conn.close()


def measured(
    pids: list[int], load: Any, database: DatabaseCpu | None = None
) -> tuple[LoadResult, float | None, float | None]:
    """Run ``load`` (a coroutine); its result, and the CPU time per request (µs) of the
    processes and of the database's backends (``database``, where given)."""
    before = cpu_seconds(pids)
    if database:
        database.start()
    result: LoadResult = asyncio.run(load)
    after = cpu_seconds(pids)
    if before is None or after is None or not result.requests:
        return result, None, None
    in_database = database.seconds() / result.requests * 1e6 if database else None
    return result, (after - before) / result.requests * 1e6, in_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3, help="alternating runs per size; ratios are their median")
    parser.add_argument("--no-make-run", action="store_true", help="leave out the make-run row")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--without-audit-writer",
        action="store_true",
        help="a diagnostic, not a configuration: the toolbay row without its audit writer (the rows wait in "
        "the journal, up to AUDIT_JOURNAL_MAX_ROWS), to see what the writer's database work costs the calls "
        "on a shared machine",
    )
    args = parser.parse_args()

    base = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "REDIS_URL": BENCH_REDIS,
        "CHANNEL_LAYER_PREFIX": "toolbay-bench:asgi",
    }
    for variable in ("DEBUG", "SECRET_KEY", "TOOLBAY_SECRET_KEYS", "DATABASE_URL", "ACCESS_LOG", "LOG_LEVEL"):
        base.pop(variable, None)
    production = Deployment(
        "toolbay",
        {
            **base,
            **production_settings(),
            "DATABASE_URL": BENCH_DATABASE_URL,
        },
        audit_writer=not args.without_audit_writer,
    )
    tmp = Path(tempfile.mkdtemp(prefix="toolbay-vs-sdk-"))
    make_run = Deployment("make-run", {**base, "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}"})
    deployments = [production] if args.no_make_run else [production, make_run]
    recreate_database()
    redis.Redis.from_url(BENCH_REDIS).flushdb()
    for deployment in deployments:
        deployment.prepare()
    database = DatabaseCpu()

    port = free_port()
    sdk_command = server_command("uvicorn", "bench.sdk_server:app", port)
    names = [deployment.name for deployment in deployments]

    def run_sdk(n: int) -> Measured:
        sdk = subprocess.Popen(sdk_command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            return measured([sdk.pid], run_load(f"http://127.0.0.1:{port}/mcp", None, n, args.seconds, ECHO))
        finally:
            sdk.terminate()
            sdk.wait(10)

    def run_deployment(deployment: Deployment, n: int) -> Measured:
        deployment.start()
        try:
            return measured(
                [process.pid for process in deployment.processes],
                run_load(deployment.url, deployment.key, n, args.seconds, ECHO),
                database if deployment is production else None,
            )
        finally:
            deployment.stop()

    # Every run measures each server once, alone on the machine, the SDK first in every
    # other run: a ratio compares servers of the same minute, and the median of the runs'
    # ratios (with the lowest and highest) is what one noisy minute cannot decide.
    rows: list[dict[str, Any]] = []
    for n in args.sessions:
        runs: list[dict[str, Measured]] = []
        for index in range(args.runs):
            measured_here: dict[str, Measured] = {}
            if index % 2:
                measured_here["sdk"] = run_sdk(n)
            for deployment in deployments:
                measured_here[deployment.name] = run_deployment(deployment, n)
            if "sdk" not in measured_here:
                measured_here["sdk"] = run_sdk(n)
            runs.append(measured_here)
            peer, peer_cpu, _ = measured_here["sdk"]
            for name in (*names, "sdk"):
                result, used, in_database = measured_here[name]
                cpu_text = f"  cpu {used:5.0f} us (x{used / peer_cpu:4.2f})" if used and peer_cpu else ""
                if in_database is not None:
                    cpu_text += f" + database {in_database:4.0f} us"
                print(
                    f"N={n:<3} run {index + 1} {name:9} {result.rate:7.0f} calls/s (x{result.rate / peer.rate:4.2f})  "
                    f"p50 {result.percentile(0.5):6.2f} ms  p99 {result.percentile(0.99):6.2f} ms "
                    f"(x{result.percentile(0.99) / peer.percentile(0.99):4.2f}){cpu_text}",
                    flush=True,
                )
        for name in (*names, "sdk"):
            rates = [run[name][0].rate for run in runs]
            p99s = [run[name][0].percentile(0.99) for run in runs]
            cpus = [run[name][1] or 0.0 for run in runs]
            rate_ratios = [run[name][0].rate / run["sdk"][0].rate for run in runs]
            p99_ratios = [run[name][0].percentile(0.99) / run["sdk"][0].percentile(0.99) for run in runs]
            cpu_ratios = [(run[name][1] or 0.0) / (run["sdk"][1] or 1.0) for run in runs]
            database_cpus = [d for run in runs if (d := run[name][2]) is not None]
            print(
                f"N={n:<3} median of {args.runs} {name:9} {spread(rates, 0)} calls/s, x{spread(rate_ratios)}; "
                f"p99 {spread(p99s)} ms, x{spread(p99_ratios)}; cpu {spread(cpus, 0)} us, x{spread(cpu_ratios)}"
                + (f"; database {spread(database_cpus, 0)} us" if database_cpus else ""),
                flush=True,
            )
            rows.append(
                {
                    "server": name,
                    "sessions": n,
                    "runs": [
                        {
                            **run[name][0].summary(),
                            "cpu_us_per_request": round(run[name][1] or 0, 1),
                            "database_cpu_us_per_request": round(d, 1) if (d := run[name][2]) is not None else None,
                        }
                        for run in runs
                    ],
                    "calls_per_s": round(statistics.median(rates), 1),
                    "rate_vs_sdk": round(statistics.median(rate_ratios), 3),
                    "rate_vs_sdk_range": [round(min(rate_ratios), 3), round(max(rate_ratios), 3)],
                    "p99_vs_sdk": round(statistics.median(p99_ratios), 3),
                    "p99_vs_sdk_range": [round(min(p99_ratios), 3), round(max(p99_ratios), 3)],
                    "cpu_us_per_request": round(statistics.median(cpus), 1),
                    "cpu_vs_sdk": round(statistics.median(cpu_ratios), 3),
                    "cpu_vs_sdk_range": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
                    "database_cpu_us_per_request": database_cpus and round(statistics.median(database_cpus), 1),
                }
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
