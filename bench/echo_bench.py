"""tools/call throughput and latency with N concurrent MCP sessions.

    python -m bench.echo_bench [--sessions 1 32] [--seconds 5] [--servers uvicorn daphne]

Sets up a throw-away SQLite database and Redis db 13, seeds the demo, starts each ASGI
server on loopback, and measures, in the same run: the bare reference app, Toolbay
`ping`, and Toolbay `tools/call echo`. Ratios are against the reference of the same run,
because absolute numbers on a shared 2-core machine move from minute to minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.loadgen import run_load

ROOT = Path(__file__).resolve().parent.parent
BENCH_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


# Every simulated client of a bench comes from 127.0.0.1: the per-address cap, meant for one
# real client, would refuse the thousand sessions of a fan-out or scale run.
LOOPBACK_CLIENTS = {"TOOLBAY_MAX_CONNECTIONS_PER_CLIENT": "0"}


def production_settings() -> dict[str, str]:
    """The production configuration's own settings (the README's and the compose file's)."""
    from cryptography.fernet import Fernet

    return {
        "DEBUG": "0",
        "SECRET_KEY": f"bench-{time.time_ns()}-not-a-secret",
        "TOOLBAY_SECRET_KEYS": Fernet.generate_key().decode(),
    }


ECHO = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hello"}}}
PING = {"jsonrpc": "2.0", "method": "ping"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(kind: str, app: str, port: int, *, access_log: bool = False) -> list[str]:
    """As the Procfile runs it; ``access_log=True`` leaves the choice to the app's ACCESS_LOG."""
    if kind == "uvicorn":
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--log-level",
            "warning",
        ]
        return command if access_log else [*command, "--no-access-log"]
    if kind == "daphne":
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0", app]
    raise ValueError(kind)


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    """Return once something accepts connections on the loopback port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout:g} s")


def start(kind: str, app: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        server_command(kind, app, port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port)
    except RuntimeError:
        process.kill()
        raise
    return process, f"http://127.0.0.1:{port}"


def prepare(env: dict[str, str]) -> str:
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(
        [*manage, "create_api_key", "demo", "--name", f"bench-{time.time_ns()}"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--servers", nargs="+", default=["uvicorn"], choices=["uvicorn", "daphne"])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="toolbay-bench-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
        "REDIS_URL": BENCH_REDIS,
        "CHANNEL_LAYER_PREFIX": "toolbay-bench:asgi",
        "LOG_LEVEL": "WARNING",
    }
    redis.Redis.from_url(BENCH_REDIS).flushdb()
    key = prepare(env)
    rows = []
    for kind in args.servers:
        reference, ref_url = start(kind, "bench.reference_app:app", env)
        toolbay, url = start(kind, "mcp_platform.asgi:application", env)
        try:
            for n in args.sessions:
                ref = asyncio.run(run_load(ref_url + "/", None, n, args.seconds, PING, mcp=False))
                ping = asyncio.run(run_load(url + "/mcp/demo", key, n, args.seconds, PING))
                echo = asyncio.run(run_load(url + "/mcp/demo", key, n, args.seconds, ECHO))
                row = {
                    "server": kind,
                    "sessions": n,
                    "reference": ref.summary(),
                    "ping": ping.summary(),
                    "echo": echo.summary(),
                    "echo_vs_reference": round(echo.rate / ref.rate, 3),
                    "ping_vs_reference": round(ping.rate / ref.rate, 3),
                }
                rows.append(row)
                print(
                    f"{kind:8} N={n:<3} reference {ref.rate:8.0f}/s | ping {ping.rate:7.0f}/s "
                    f"(x{row['ping_vs_reference']:.2f}) | echo {echo.rate:7.0f}/s (x{row['echo_vs_reference']:.2f}) "
                    f"p50 {echo.percentile(0.5):6.2f} ms p99 {echo.percentile(0.99):6.2f} ms",
                    flush=True,
                )
        finally:
            for process in (reference, toolbay):
                process.terminate()
                process.wait(10)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
