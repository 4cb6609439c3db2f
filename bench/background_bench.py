"""Overhead of a background (Celery) call over an inline one, measured in the same run.

    python -m bench.background_bench [--seconds 6] [--sessions 1 32] [--runs 3] [--concurrency 2]

Each size is measured ``--runs`` times, inline and background taking turns, and reported as
the median of the runs with the lowest and highest. Beside latency and calls/s it gives the
CPU time per call of the web server, the Celery worker (its pool included), the audit writer,
Redis and the whole machine (every process, the load client's too): what bounds calls/s on
a machine is CPU per call, whichever process spends it.

Runs the production configuration (DEBUG=0) on a throw-away PostgreSQL database
(BENCH_DATABASE_URL, default toolbay_bench on the local server, dropped and recreated) and
Redis db 13. Both tools run the same no-op
handler (echo); the difference is the queue hop, the run row and the relayed stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.echo_bench import BENCH_REDIS, ROOT, production_settings, start
from bench.loadgen import LoadResult, run_load
from bench.measure import cpu_ms, machine_busy_ms, spread

BENCH_DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay_bench")

SETUP = """
from tenants.models import Tenant
from tools_app.catalog.models import AccessRule, Tool
demo = Tenant.objects.get(slug="demo")
for name, mode in (("noop_inline", "inline"), ("noop_background", "background")):
    Tool.objects.update_or_create(tenant=None, name=name, defaults=dict(
        description="benchmark no-op", input_schema={"type": "object"}, backend_config={"handler": "demo.echo"},
        read_only_hint=True,
        execution_mode=mode, tags=["bench"]))
AccessRule.objects.get_or_create(tool=None, tool_pattern="tag:bench", tenant=demo, effect="allow")
"""


def recreate_database() -> None:
    base, _, name = BENCH_DATABASE_URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def production_env(**extra: str) -> dict[str, str]:
    """A bench server's environment: the production configuration on the bench's own
    PostgreSQL database and Redis db (``fresh_stores`` empties both)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": BENCH_DATABASE_URL,
        "REDIS_URL": BENCH_REDIS,
        "CHANNEL_LAYER_PREFIX": "toolbay-bench:asgi",
        "LOG_LEVEL": "WARNING",
        **production_settings(),
        **extra,
    }


def fresh_stores() -> None:
    recreate_database()
    redis.Redis.from_url(BENCH_REDIS).flushdb()


def call(name: str) -> dict:
    return {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": name, "arguments": {"text": "x"}}}


@dataclass
class Measured:
    load: LoadResult
    cpu_ms_per_call: dict[str, float]  # per process, and "machine"


def redis_pid() -> int:
    """The Redis server the bench uses (on this machine: its CPU reads as 0 otherwise)."""
    return int(redis.Redis.from_url(BENCH_REDIS).info("server")["process_id"])


def measure(url: str, key: str, sessions: int, seconds: float, mode: str, processes: dict[str, int]) -> Measured:
    """One run of one mode; CPU is read around the whole run (its warm-up too), so it is
    divided by every call the run made."""
    before = {name: cpu_ms(pid, with_children=True) for name, pid in processes.items()} | {"machine": machine_busy_ms()}
    load = asyncio.run(run_load(url, key, sessions, seconds, call(f"noop_{mode}")))
    after = {name: cpu_ms(pid, with_children=True) for name, pid in processes.items()} | {"machine": machine_busy_ms()}
    calls = max(load.requests, 1)
    return Measured(load, {name: (after[name] - before[name]) / calls for name in before})


def summarise(sessions: int, measured: dict[str, list[Measured]]) -> dict[str, Any]:
    inline, background = measured["inline"], measured["background"]
    p50_overhead = [b.load.percentile(0.5) - i.load.percentile(0.5) for i, b in zip(inline, background, strict=True)]
    rate_ratio = [b.load.rate / i.load.rate for i, b in zip(inline, background, strict=True)]
    row: dict[str, Any] = {"sessions": sessions, "runs": len(inline)}
    for mode, runs in measured.items():
        row[mode] = {
            "p50_ms": statistics.median(m.load.percentile(0.5) for m in runs),
            "p99_ms": statistics.median(m.load.percentile(0.99) for m in runs),
            "calls_per_s": statistics.median(m.load.rate for m in runs),
            "cpu_ms_per_call": {
                name: round(statistics.median(m.cpu_ms_per_call[name] for m in runs), 3)
                for name in runs[0].cpu_ms_per_call
            },
        }
        print(
            f"N={sessions:<3} {mode:10} p50 {spread([m.load.percentile(0.5) for m in runs])} ms, "
            f"p99 {spread([m.load.percentile(0.99) for m in runs])} ms, "
            f"{spread([m.load.rate for m in runs], 0)} calls/s; CPU ms per call: "
            + ", ".join(
                f"{name} {spread([m.cpu_ms_per_call[name] for m in runs], 3)}" for name in runs[0].cpu_ms_per_call
            ),
            flush=True,
        )
    row["p50_overhead_ms"] = round(statistics.median(p50_overhead), 2)
    row["rate_ratio"] = round(statistics.median(rate_ratio), 3)
    print(
        f"N={sessions:<3} background over inline: p50 +{spread(p50_overhead)} ms; calls/s x{spread(rate_ratio, 3)}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2, help="the Celery worker's pool size")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    env = production_env()
    fresh_stores()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*manage, "shell", "-c", SETUP], cwd=ROOT, env=env, check=True)
    key = (
        subprocess.run(
            [*manage, "create_api_key", "demo", "--name", f"bench-{time.time_ns()}"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mcp_platform",
            "worker",
            "-Q",
            "toolbay.short",
            "-c",
            str(args.concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # The production set of processes: the audit writer drains the invocation journal (and,
    # where runs are written behind, the runs' changes) while the calls run.
    writer = subprocess.Popen(
        [*manage, "audit_writer"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server, url = start("uvicorn", "mcp_platform.asgi:application", env)
    rows = []
    try:
        time.sleep(3)  # let the worker connect to the broker
        processes = {"server": server.pid, "worker": worker.pid, "writer": writer.pid, "redis": redis_pid()}
        for n in args.sessions:
            measured: dict[str, list[Measured]] = {"inline": [], "background": []}
            for _ in range(args.runs):
                for mode in measured:
                    measured[mode].append(measure(url + "/mcp/demo", key, n, args.seconds, mode, processes))
            row = summarise(n, measured)
            rows.append(row)
    finally:
        server.terminate()
        worker.terminate()
        writer.terminate()
        server.wait(10)
        worker.wait(20)
        writer.wait(20)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
