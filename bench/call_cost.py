"""What one inline tools/call costs the server: CPU time, instructions and where they go.

    python -m bench.call_cost                      # prepare, then CPU µs per call (3 runs)
    python -m bench.call_cost --callgrind          # instructions per call (valgrind, 3 runs)
    python -m bench.call_cost --profile            # cProfile of the loop: the heaviest frames
    python -m bench.call_cost --steps              # a sequential caller's Redis round trips
    python -m bench.call_cost --root ../other-tree # the same, measured in another checkout

The loop drives ``tools/call echo`` on one initialized MCP session straight through
``mcp_platform.asgi.application`` (edge guard, endpoint, transport, engine, the platform's
host: auth, limits, validation, confirmation check, the audit journal's append), with the
production settings on PostgreSQL (BENCH_DATABASE_URL, recreated) and Redis
(BENCH_REDIS_URL, flushed). Only the socket and uvicorn's HTTP parser are left out, so what
it counts is the platform's own work per call; ``vs_sdk`` measures the whole server.

Times move with the load of a shared machine; instruction counts hardly do. ``--callgrind``
runs the loop twice under valgrind (``WARM`` and ``WARM + CALLS`` calls) and divides the
difference by ``CALLS``: start-up cancels out, no instrumentation toggling is needed.
Each figure is the median of ``--runs`` runs, with the lowest and highest.

The loop itself lives in this file and imports nothing else from ``bench/``, so
``--root`` can measure an older checkout that predates this file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TENANT = "demo"
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}


class Exchange:
    """One request through the ASGI app as uvicorn hands it over: body in, response out."""

    def __init__(self, app: Any, key: str, session_id: str = "") -> None:
        self.app = app
        self.headers = [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"authorization", f"Bearer {key}".encode()),
            (b"mcp-protocol-version", b"2025-11-25"),
        ]
        if session_id:
            self.headers.append((b"mcp-session-id", session_id.encode()))

    async def post(self, message: dict[str, Any]) -> tuple[int, dict[bytes, bytes], bytes]:
        import orjson

        body = orjson.dumps(message)
        done = asyncio.Event()
        sent = False
        status = 0
        headers: dict[bytes, bytes] = {}
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(event: dict[str, Any]) -> None:
            nonlocal status
            if event["type"] == "http.response.start":
                status = event["status"]
                headers.update(event.get("headers", []))
            elif event["type"] == "http.response.body":
                chunks.append(event.get("body", b""))
                if not event.get("more_body"):
                    done.set()

        path = f"/mcp/{TENANT}"
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": self.headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        await self.app(scope, receive, send)
        return status, headers, b"".join(chunks)


# --- the loop (a child process, in the tree being measured) ------------------------------


def _prepare(key_file: Path) -> None:
    import io

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=io.StringIO())
    from tenants.models import Tenant
    from tenants.services import api_key_create

    tenant = Tenant.objects.get(slug=TENANT)
    # The bench's calls must not hit the tenant's limits, but the limit counters still run.
    Tenant.objects.filter(pk=tenant.pk).update(calls_per_minute=100_000_000, max_concurrent_calls=100_000)
    _, raw = api_key_create(tenant=tenant, name=f"call cost {time.time_ns()}")
    key_file.write_text(raw)


class _RedisSteps:
    """Where a sequential caller's time goes: each Redis round trip of the hot path's
    multiplexed connection (``CommandBatch.run``), by its commands, from queued to answered."""

    def __init__(self) -> None:
        from mcp_platform.redis_batch import CommandBatch

        self.waits: dict[str, list[float]] = {}
        self.counting = False
        original = CommandBatch.run

        def run(batch: Any, commands: Any) -> Any:
            future = original(batch, commands)
            if self.counting:
                label = "+".join(str(command[0]) for command in commands)
                started = time.perf_counter()
                future.add_done_callback(
                    lambda _: self.waits.setdefault(label, []).append(time.perf_counter() - started)
                )
            return future

        CommandBatch.run = run  # type: ignore[method-assign,assignment]

    def report(self, calls: int, wall: float) -> None:
        print(f"per call: {wall / calls * 1e6:.0f} µs wall; Redis round trips (queued to answered):")
        for label, waits in sorted(self.waits.items(), key=lambda item: -sum(item[1])):
            print(
                f"  {label:40} {len(waits) / calls:4.2f} per call, {sum(waits) / calls * 1e6:6.1f} µs per call, "
                f"median {statistics.median(waits) * 1e6:6.1f} µs"
            )


async def _loop(key: str, warm: int, calls: int, profile: Path | None, steps: bool = False) -> None:
    from mcp_platform.asgi import application

    redis_steps = _RedisSteps() if steps else None

    opening = Exchange(application, key)
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "call-cost", "version": "1"}}
    status, headers, _ = await opening.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    assert status == 200, status
    session = Exchange(application, key, headers[b"mcp-session-id"].decode())
    await session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for _ in range(warm):  # caches, connections, lazy imports
        status, _, body = await session.post(CALL)
        assert status == 200 and b'"hi"' in body, body
    if redis_steps is not None:
        redis_steps.counting = True
    profiler = None
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    before, clock = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
        status, _, body = await session.post(CALL)
    elapsed = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(profile))
    assert status == 200 and b'"hi"' in body, body
    if redis_steps is not None:
        redis_steps.report(calls, elapsed)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"cpu_us={cpu / max(calls, 1) * 1e6:.1f} wall_us={elapsed / max(calls, 1) * 1e6:.1f}", flush=True)


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
    sys.path.insert(0, os.getcwd())
    import django

    django.setup()
    if args.prepare:
        _prepare(args.key_file)
        return
    if args.pin_timers:
        # Under valgrind a call runs ~50x slower: past the 50 ms after which a call registers
        # for cancellations, every call would, which no real call at this load does. The
        # registration is measured where it happens (scale_bench), not here.
        import importlib

        for module in ("mcp_platform.mcp.links", "mcp_platform.mcp.calls"):  # now, and in older trees
            try:
                loaded = importlib.import_module(module)
            except ModuleNotFoundError:
                continue
            if hasattr(loaded, "REGISTER_DELAY_SECONDS"):
                loaded.REGISTER_DELAY_SECONDS = 3600.0  # type: ignore[attr-defined]
        # Likewise the per-interval writes (a key's last use, a session's activity), which a
        # slow run would make more often than a fast one: once at the start, then never.
        import mcp_platform.mcp.sessions
        import tenants.auth

        tenants.auth.LAST_USED_WRITE_INTERVAL = 1e9
        mcp_platform.mcp.sessions.TOUCH_INTERVAL_SECONDS = 1e9
    import uvloop

    uvloop.run(_loop(args.key_file.read_text().strip(), args.warm, args.calls, args.profile, args.steps))


# --- the driver ------------------------------------------------------------------------


def _env(database_url: str, redis_url: str) -> dict[str, str]:
    from cryptography.fernet import Fernet

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OTEL_") and key not in ("ACCESS_LOG", "LOG_LEVEL")
    }
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CHANNEL_LAYER_PREFIX": "toolbay-call-cost:asgi",
        "DEBUG": "0",
        "SECRET_KEY": "call-cost-bench-not-a-secret",
        "TOOLBAY_SECRET_KEYS": Fernet.generate_key().decode(),
        "PYTHONHASHSEED": "0",  # the same dict and set layouts in every run
        "PYTHONPATH": "",
    }


def _recreate(database_url: str) -> None:
    import psycopg

    base, _, name = database_url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _run_child(root: Path, env: dict[str, str], argv: list[str], wrapper: list[str] | None = None) -> str:
    command = [*(wrapper or []), sys.executable, str(Path(__file__).resolve()), "--child", *argv]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _callgrind_total(root: Path, env: dict[str, str], base: list[str], calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        _run_child(
            root,
            env,
            [*base, "--calls", str(calls), "--pin-timers"],
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--trace-children=no"],
        )
        text = out.read_text()
    match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    assert match, "no totals in the callgrind output"
    return int(match.group(1))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true", help="instructions per call (valgrind)")
    parser.add_argument("--profile", nargs="?", const=Path("call_cost.prof"), type=Path, help="cProfile the loop")
    parser.add_argument("--steps", action="store_true", help="a sequential caller's Redis round trips")
    parser.add_argument("--no-prepare", action="store_true", help="reuse the database and key of the last run")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay_bench"),
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--key-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pin-timers", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    import redis

    root = args.root.resolve()
    env = _env(args.database_url, args.redis_url)
    key_file = Path(tempfile.gettempdir()) / f"toolbay-call-cost-{args.database_url.rpartition('/')[2]}.key"
    if not args.no_prepare:
        _recreate(args.database_url)
        redis.Redis.from_url(args.redis_url).flushdb()
        _run_child(root, env, ["--prepare", "--key-file", str(key_file)])
    base = ["--key-file", str(key_file), "--warm", str(args.warm)]
    if args.steps:
        print(_run_child(root, env, [*base, "--calls", str(args.calls), "--steps"]), end="")
        return
    if args.profile is not None:
        _run_child(root, env, [*base, "--calls", str(args.calls), "--profile", str(args.profile.resolve())])
        import pstats

        stats = pstats.Stats(str(args.profile.resolve()))
        total_calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
        print(f"{root}: {total_calls / args.calls:.0f} Python function calls per tools/call")
        stats.sort_stats("tottime").print_stats(25)
        return
    if args.callgrind:
        per_call = []
        for _ in range(args.runs):
            low = _callgrind_total(root, env, base, 0)
            high = _callgrind_total(root, env, base, args.calls)
            per_call.append((high - low) / args.calls)
            print(f"  run: {per_call[-1]:,.0f} instructions per call", flush=True)
        print(f"{root}: instructions per call {spread(per_call)}")
        return
    cpu, wall = [], []
    for _ in range(args.runs):
        line = _run_child(root, env, [*base, "--calls", str(args.calls)]).strip().splitlines()[-1]
        fields = dict(field.split("=") for field in line.split())
        cpu.append(float(fields["cpu_us"]))
        wall.append(float(fields["wall_us"]))
    print(f"{root}: CPU µs per call {spread(cpu)}; wall µs per call {spread(wall)}")


if __name__ == "__main__":
    main()
