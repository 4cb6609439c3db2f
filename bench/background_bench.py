"""Overhead of a background (Celery) call over an inline one, measured in the same run.

    python -m bench.background_bench [--calls 300] [--sessions 1 8]

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
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import redis

from bench.echo_bench import BENCH_REDIS, ROOT, production_settings, start
from bench.loadgen import run_load

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8])
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
            "2",
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
        for n in args.sessions:
            inline = asyncio.run(run_load(url + "/mcp/demo", key, n, args.seconds, call("noop_inline")))
            background = asyncio.run(run_load(url + "/mcp/demo", key, n, args.seconds, call("noop_background")))
            row = {
                "sessions": n,
                "inline": inline.summary(),
                "background": background.summary(),
                "p50_overhead_ms": round(background.percentile(0.5) - inline.percentile(0.5), 2),
                "p50_ratio": round(background.percentile(0.5) / inline.percentile(0.5), 1),
                "p99_ratio": round(background.percentile(0.99) / inline.percentile(0.99), 1),
            }
            rows.append(row)
            print(
                f"N={n:<2} inline p50 {inline.percentile(0.5):6.2f} ms p99 {inline.percentile(0.99):6.2f} ms "
                f"({inline.rate:6.0f}/s) | background p50 {background.percentile(0.5):6.2f} ms "
                f"p99 {background.percentile(0.99):6.2f} ms ({background.rate:5.0f}/s) | "
                f"p50 x{row['p50_ratio']}, p99 x{row['p99_ratio']}",
                flush=True,
            )
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
