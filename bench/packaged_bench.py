"""Inline latency of a packaged MCP server through Toolbay against a direct stdio session.

    python -m bench.packaged_bench [--calls 200] [--runs 3] [--package mcp-server-time==2026.10.19]

Sets up a throw-away PostgreSQL database (``BENCH_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/toolbay_packaged_bench``, created when missing) and Redis
db 13, adds the PyPI package for a tenant with ``add_upstream`` (installed into the package
cache under var/packages), starts ``run_packaged`` and one uvicorn, warms the instance, then
measures in the same run, ``--runs`` times each, ``--calls`` sequential ``tools/call``
(``get_current_time``) with the official SDK client:

- direct: a stdio session with the installed server (the SDK's stdio client, the same
  command the runner starts; no sandbox, no network hop);
- runner relay: the SDK client straight to the runner's endpoint of that instance (the hop
  Toolbay's upstream client makes), to tell the relay's cost from Toolbay's call path;
- Toolbay: Streamable HTTP to uvicorn → Toolbay's call path (auth, visibility, validation,
  audit journal) → the runner's relay on loopback → the same server over stdio.

Prints the median and p95 of each run, and the median of the run medians with their spread.
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
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import redis
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.echo_bench import LOOPBACK_CLIENTS, free_port, production_settings, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
BENCH_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
BENCH_DATABASE = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay_packaged_bench")
TENANT = "bench-packaged"


def _ensure_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')


def _env() -> dict[str, str]:
    from tools_app.backends.packaged.sandbox import sandbox_status

    env = {
        **os.environ,
        **production_settings(),
        **LOOPBACK_CLIENTS,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": BENCH_DATABASE,
        "REDIS_URL": BENCH_REDIS,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "TOOLBAY_PACKAGE_CACHE": str(ROOT / "var" / "packages"),
    }
    if not sandbox_status().available:
        env["TOOLBAY_SANDBOX_OPTOUT"] = "1"
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def _figures(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


async def _time_calls(client: Client, name: str, calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        result = await client.call_tool(name, {"timezone": "UTC"})
        samples.append(time.perf_counter() - start)
        assert not result.is_error, result
    return samples


async def _direct(argv: list[str], calls: int) -> list[float]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={"PATH": "/usr/bin:/bin"})
    async with Client(params, mode="legacy") as client:
        await _time_calls(client, "get_current_time", 5)  # warm
        return await _time_calls(client, "get_current_time", calls)


async def _relay_only(calls: int) -> list[float]:
    """Straight to the runner's endpoint of the instance (what Toolbay's upstream client does)."""
    client_redis = redis.Redis.from_url(BENCH_REDIS)
    keys = list(client_redis.scan_iter(match="toolbay:packaged:instance:*"))
    statuses = [json.loads(raw) for raw in client_redis.mget(keys) if raw]
    status = next(s for s in statuses if s.get("state") == "running" and s.get("tenant") != 0)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {status['token']}"}, timeout=60)
    async with Client(streamable_http_client(status["url"], http_client=http), mode="legacy") as client:
        await _time_calls(client, "get_current_time", 5)
        return await _time_calls(client, "get_current_time", calls)


async def _through_toolbay(url: str, key: str, calls: int) -> list[float]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with Client(streamable_http_client(f"{url}/mcp/{TENANT}", http_client=http), mode="legacy") as client:
        await _time_calls(client, "time.get_current_time", 5)  # warm (the first call starts the instance)
        return await _time_calls(client, "time.get_current_time", calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--package", default="mcp-server-time==2026.10.19")
    args = parser.parse_args()
    env = _env()
    _ensure_database(BENCH_DATABASE)
    redis.Redis.from_url(BENCH_REDIS).flushdb()
    _manage(env, "migrate", "-v", "0")
    _manage(env, "create_tenant", TENANT, "--name", "Packaged bench")
    key = _manage(env, "create_api_key", TENANT, "--name", "bench").strip().splitlines()[-1]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        runner = subprocess.Popen(
            [sys.executable, "manage.py", "run_packaged"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(runner)
        _wait_runner()
        published = _manage(
            env,
            "add_upstream",
            "time",
            "--tenant",
            TENANT,
            "--pypi",
            args.package,
            "--prefix",
            "time.",
            "--publish-all",
            "--grant",
        )
        print(published.strip())
        port = free_port()
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "mcp_platform.asgi:application",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--no-access-log",
                "--loop",
                "uvloop",
                "--http",
                "httptools",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(web)
        wait_for_port(port)
        argv = _installed_argv(env, args.package)
        results: dict[str, list[tuple[float, float]]] = {"direct stdio": [], "runner relay": [], "through Toolbay": []}
        for run in range(args.runs):
            direct = asyncio.run(_direct(argv, args.calls))
            toolbay = asyncio.run(_through_toolbay(f"http://127.0.0.1:{port}", key, args.calls))
            relay = asyncio.run(_relay_only(args.calls))
            for label, samples in (("direct stdio", direct), ("runner relay", relay), ("through Toolbay", toolbay)):
                median, p95 = _figures(samples)
                results[label].append((median, p95))
                print(f"run {run + 1}: {label:16} median {median:6.2f} ms  p95 {p95:6.2f} ms  ({args.calls} calls)")
        print()
        for label, runs in results.items():
            medians = [m for m, _ in runs]
            p95s = [p for _, p in runs]
            print(
                f"{label:16} median of run medians {statistics.median(medians):6.2f} ms "
                f"(spread {min(medians):.2f}-{max(medians):.2f}); p95 {statistics.median(p95s):6.2f} ms"
            )
        added = statistics.median(m for m, _ in results["through Toolbay"]) - statistics.median(
            m for m, _ in results["direct stdio"]
        )
        print(f"Toolbay adds {added:.2f} ms per call (median)")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_runner() -> None:
    client = redis.Redis.from_url(BENCH_REDIS)
    deadline = time.monotonic() + 30
    while not client.zcard("toolbay:packaged:runners"):
        if time.monotonic() > deadline:
            raise RuntimeError("the runner did not start")
        time.sleep(0.1)


def _installed_argv(env: dict[str, str], package: str) -> list[str]:
    name, _, version = package.partition("==")
    code = (
        "import django, json; django.setup(); from tools_app.backends.packaged.install import installed;"
        f"print(json.dumps(installed('pypi', {name!r}, {version!r}).argv))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    argv: list[Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return [str(part) for part in argv]


if __name__ == "__main__":
    main()
