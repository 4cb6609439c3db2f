"""What the invocation log costs on the call path: echo calls/s with and without it.

    python -m bench.audit_bench [--sessions 1 32] [--seconds 5]

Two identical servers in the same run, AUDIT_INVOCATIONS=1 and =0, against PostgreSQL
(toolbay_bench, recreated) and Redis db 13. Also checks that every call was written.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import psycopg
import redis

from bench.background_bench import BENCH_DATABASE_URL, recreate_database
from bench.echo_bench import BENCH_REDIS, ECHO, ROOT, start
from bench.loadgen import run_load


def count_rows() -> int:
    with psycopg.connect(BENCH_DATABASE_URL) as conn:
        return int(conn.execute("SELECT count(*) FROM audit_invocation").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": BENCH_DATABASE_URL,
        "REDIS_URL": BENCH_REDIS,
        "CHANNEL_LAYER_PREFIX": "toolbay-bench:asgi",
        "LOG_LEVEL": "WARNING",
    }
    recreate_database()
    redis.Redis.from_url(BENCH_REDIS).flushdb()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    key = (
        subprocess.run(
            [*manage, "create_api_key", "demo", "--name", "audit-bench"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    with_audit, with_url = start("uvicorn", "mcp_platform.asgi:application", {**env, "AUDIT_INVOCATIONS": "1"})
    without, without_url = start("uvicorn", "mcp_platform.asgi:application", {**env, "AUDIT_INVOCATIONS": "0"})
    try:
        for n in args.sessions:
            before = count_rows()
            on = asyncio.run(run_load(with_url + "/mcp/demo", key, n, args.seconds, ECHO, warmup=0.0))
            time.sleep(1.5)  # let the last batch flush
            written = count_rows() - before
            off = asyncio.run(run_load(without_url + "/mcp/demo", key, n, args.seconds, ECHO, warmup=0.0))
            print(
                f"N={n:<3} with audit {on.rate:7.0f}/s (p50 {on.percentile(0.5):5.2f} ms, p99 "
                f"{on.percentile(0.99):6.2f} ms) | without {off.rate:7.0f}/s (p50 {off.percentile(0.5):5.2f} ms, "
                f"p99 {off.percentile(0.99):6.2f} ms) | ratio x{on.rate / off.rate:.2f} | rows written "
                f"{written}/{on.calls}",
                flush=True,
            )
    finally:
        for process in (with_audit, without):
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
