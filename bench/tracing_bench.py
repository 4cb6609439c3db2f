"""What tracing costs a tools/call: a tight in-process loop through the whole ASGI app.

    python -m bench.tracing_bench --prepare            # once: migrate, seed, write a key
    python -m bench.tracing_bench --calls 2000         # calls/s and CPU µs per call
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python -m bench.tracing_bench --receiver --calls 2000
    python -m bench.tracing_bench --compare --runs 3   # off and on (100 %) alternately: cost per call

Each call goes through ``mcp_platform.asgi.application`` exactly as uvicorn hands it a
request (edge guard, endpoint, transport, engine, the platform's host, audit journal), on
one initialized MCP session, with the real PostgreSQL and Redis of ``DATABASE_URL`` and
``REDIS_URL``; only the socket and the HTTP parser are left out, so the loop counts the work
tracing adds. ``--receiver`` starts a loopback OTLP/HTTP receiver (another process) for the
exported spans. With ``--wait`` the loop waits for a line on stdin before it starts and
after it ends, so an instruction counter (``callgrind_control -i on/off``) can bracket it:
on a shared machine instruction counts move far less than times do.

``--compare`` runs the loop in fresh processes, tracing unset and tracing on (OTLP/HTTP to
the loopback receiver, every call sampled) in turn, ``--runs`` times each, and prints CPU µs
per call for both as the median of the runs (lowest-highest) and what tracing adds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.measure import spread

KEY_FILE = Path(os.environ.get("TRACING_BENCH_KEY_FILE", "/tmp/toolbay-tracing-bench.key"))
TENANT = "demo"
RECEIVER = """
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
ThreadingHTTPServer(("127.0.0.1", int(__import__("sys").argv[1])), H).serve_forever()
"""


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
    import django

    django.setup()


def prepare() -> None:
    import io

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=io.StringIO())
    from tenants.models import Tenant
    from tenants.services import api_key_create

    tenant = Tenant.objects.get(slug=TENANT)
    Tenant.objects.filter(pk=tenant.pk).update(calls_per_minute=100_000_000, max_concurrent_calls=100_000)
    _, raw = api_key_create(tenant=tenant, name=f"tracing bench {time.time_ns()}")
    KEY_FILE.write_text(raw)
    print(f"key written to {KEY_FILE}")


class Exchange:
    """One request through the ASGI app: its body in, the response out."""

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

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": f"/mcp/{TENANT}",
            "raw_path": f"/mcp/{TENANT}".encode(),
            "query_string": b"",
            "root_path": "",
            "headers": self.headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        await self.app(scope, receive, send)
        return status, headers, b"".join(chunks)


async def run(calls: int, wait: bool) -> None:
    from mcp_platform.asgi import application

    key = KEY_FILE.read_text().strip()
    opening = Exchange(application, key)
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "tracing-bench", "version": "1"},
    }
    status, headers, _ = await opening.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    assert status == 200, status
    session = Exchange(application, key, headers[b"mcp-session-id"].decode())
    await session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}
    for _ in range(200):  # warm: caches, connections, JIT-free but lazy imports done
        status, _, body = await session.post(call)
        assert status == 200 and b'"hi"' in body, body
    if wait:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    before, clock = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
        await session.post(call)
    elapsed = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_SELF)
    if wait:
        print("done", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    from opentelemetry import trace

    from mcp_platform import tracing

    tracing.flush()
    getattr(trace.get_tracer_provider(), "shutdown", lambda: None)()  # before the receiver stops
    print(
        f"tracing={'on' if tracing.ENABLED else 'off'} calls={calls} "
        f"calls/s={calls / elapsed:.0f} wall_us/call={elapsed / calls * 1e6:.1f} cpu_us/call={cpu / calls * 1e6:.1f}",
        flush=True,
    )


def compare(calls: int, runs: int) -> None:
    """Tracing off and on in alternating child processes: CPU per call, median of ``runs``."""
    import statistics

    off_env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    on_env = {
        **off_env,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_TRACES_SAMPLER": "always_on",
    }
    command = [sys.executable, "-m", "bench.tracing_bench", "--calls", str(calls)]
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for index in range(runs):
        order = (("off", off_env, command), ("on", on_env, [*command, "--receiver"]))
        for name, env, argv in order if index % 2 == 0 else reversed(order):
            out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
            fields = dict(part.split("=", 1) for part in out.strip().splitlines()[-1].split())
            cpu[name].append(float(fields["cpu_us/call"]))
            print(f"run {index + 1} tracing {name}: {fields['cpu_us/call']} µs CPU per call", flush=True)

    added = [on - off for off, on in zip(cpu["off"], cpu["on"], strict=True)]
    factor = statistics.median(cpu["on"]) / statistics.median(cpu["off"])
    print(
        f"CPU µs per call, median of {runs}: tracing unset {spread(cpu['off'], 0)}, "
        f"on at 100 % {spread(cpu['on'], 0)}; "
        f"tracing adds {spread(added, 0)} µs per call (x{factor:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="migrate, seed the demo tenant and write a key")
    parser.add_argument("--compare", action="store_true", help="tracing off and on in turn: the cost per call")
    parser.add_argument("--runs", type=int, default=3, help="with --compare: runs of each")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--receiver", action="store_true", help="start a loopback OTLP/HTTP receiver on 4318")
    parser.add_argument("--wait", action="store_true", help="wait for stdin lines around the measured loop")
    args = parser.parse_args()
    if args.compare:
        compare(args.calls, args.runs)
        return
    receiver = None
    if args.receiver:
        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, "4318"])
    try:
        _setup()
        if args.prepare:
            prepare()
        else:
            import uvloop

            uvloop.run(run(args.calls, args.wait))
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait()


if __name__ == "__main__":
    main()
