"""list_changed fan-out: N sessions with open GET streams, one tool edit, time to deliver.

    python -m bench.fanout_bench [--sessions 100 1000] [--servers 2]

Sessions are spread over several uvicorn processes (so delivery crosses processes), in the
production configuration (DEBUG=0). The
clock starts just before the edit is committed in this process, and stops for each
session when its stream carries notifications/tools/list_changed. Memory per idle
session is the growth of the servers' resident memory while the N streams were opened,
divided by N, once each server has served one session of its own (which loads what a process
loads once: the tenant's catalog, its Redis and channel-layer connections, the stream hub);
the figure in brackets counts that one-time load too, as this bench did before 2026-11-27.
The floor is the same for a bare ASGI app holding SSE streams open, what the ASGI server
(uvicorn, httptools) costs before any Toolbay code; ``bench.idle_memory`` says where the rest
goes. Uses PostgreSQL BENCH_DATABASE_URL (default toolbay_bench, recreated) and Redis
BENCH_REDIS_URL (default db 13).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.background_bench import fresh_stores, production_env
from bench.echo_bench import LOOPBACK_CLIENTS, ROOT, start
from bench.loadgen import Connection

MARKER = b"notifications/tools/list_changed"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def floor_kib(url: str, pid: int, sessions: int) -> float:
    """RSS per idle SSE connection of the bare ``reference_app.stream_app`` (same server, flags)."""

    async def open_one() -> Connection:
        conn = Connection(url, None)
        await conn.open()
        request = f"GET / HTTP/1.1\r\nHost: localhost:{conn.port}\r\nAccept: text/event-stream\r\n\r\n"
        conn.writer.write(request.encode())
        buffer = b""
        while b"retry: 1000" not in buffer:
            buffer += await conn.reader.read(4096)
        return conn

    before = rss_kib(pid)
    conns: list[Connection] = []
    for _ in range(0, sessions, 50):
        conns += await asyncio.gather(*(open_one() for _ in range(50)))
    await asyncio.sleep(1.0)
    after = rss_kib(pid)
    for conn in conns:
        conn.close()
    return round((after - before) / len(conns), 1)


class Listener:
    """One MCP session with its standalone GET stream open."""

    def __init__(self, url: str, key: str) -> None:
        self.conn = Connection(url, key)
        self.received_at: float | None = None
        self.ready = asyncio.Event()

    async def open(self) -> None:
        await self.conn.open()
        await self.conn.initialize()
        request = (
            f"GET {self.conn.path} HTTP/1.1\r\nHost: localhost:{self.conn.port}\r\n"
            f"Accept: text/event-stream\r\nAuthorization: Bearer {self.conn.key}\r\n"
            f"Mcp-Session-Id: {self.conn.session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
        )
        self.conn.writer.write(request.encode())
        buffer = b""
        while b"retry: 1000" not in buffer:  # the priming event: the stream is registered
            buffer += await self.conn.reader.read(4096)
        self.ready.set()

    async def listen(self) -> None:
        buffer = b""
        while MARKER not in buffer:
            chunk = await self.conn.reader.read(4096)
            if not chunk:
                return
            buffer = buffer[-64:] + chunk
        self.received_at = time.perf_counter()


def django_setup(env: dict[str, str]) -> None:
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def edit_tool() -> float:
    from tools_app.catalog.models import Tool

    tool = Tool.objects.get(name="echo", tenant=None)
    tool.description = f"Returns the text you send, unchanged ({time.time_ns()})."
    started = time.perf_counter()
    tool.save()  # autocommit: the fan-out is published from inside save()
    return started


async def measure(urls: list[str], key: str, sessions: int, pids: list[int]) -> dict[str, float]:
    cold = sum(rss_kib(pid) for pid in pids)
    warm = [Listener(url, key) for url in urls]  # each process's one-time loads, not the sessions'
    await asyncio.gather(*(listener.open() for listener in warm))
    await asyncio.sleep(0.5)
    before = sum(rss_kib(pid) for pid in pids)
    listeners = [Listener(urls[i % len(urls)], key) for i in range(sessions)]
    for batch in range(0, sessions, 50):
        await asyncio.gather(*(listener.open() for listener in listeners[batch : batch + 50]))
    await asyncio.sleep(1.0)
    after = sum(rss_kib(pid) for pid in pids)
    tasks = [asyncio.ensure_future(listener.listen()) for listener in listeners]
    started = await asyncio.to_thread(edit_tool)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    delays = sorted((listener.received_at - started) * 1000 for listener in listeners if listener.received_at)
    for listener in [*warm, *listeners]:
        listener.conn.close()
    return {
        "sessions": sessions,
        "delivered": len(delays),
        "p50_ms": round(statistics.median(delays), 1),
        "p99_ms": round(delays[min(len(delays) - 1, int(0.99 * len(delays)))], 1),
        "max_ms": round(delays[-1], 1),
        "kib_per_idle_session": round((after - before) / sessions, 1),
        "kib_per_idle_session_with_first": round((after - cold) / sessions, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))

    env = production_env(MCP_SSE_KEEPALIVE_SECONDS="60", **LOOPBACK_CLIENTS)
    fresh_stores()
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    key = (
        subprocess.run(
            [*manage, "create_api_key", "demo", "--name", "fanout"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    floor_server, floor_url = start("uvicorn", "bench.reference_app:stream_app", env)
    try:
        floor = asyncio.run(floor_kib(floor_url, floor_server.pid, max(args.sessions)))
    finally:
        floor_server.terminate()
        floor_server.wait(10)
    print(f"floor: the ASGI server alone holds {floor} KiB per idle SSE connection (bench.reference_app)", flush=True)
    django_setup(env)
    servers = [start("uvicorn", "mcp_platform.asgi:application", env) for _ in range(args.servers)]
    rows = []
    try:
        urls = [url + "/mcp/demo" for _, url in servers]
        pids = [process.pid for process, _ in servers]
        for n in args.sessions:
            row = asyncio.run(measure(urls, key, n, pids))
            rows.append(row)
            print(
                f"N={n:<5} delivered {row['delivered']}/{n}  p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                f"max {row['max_ms']} ms  memory/idle session {row['kib_per_idle_session']} KiB "
                f"({row['kib_per_idle_session_with_first']} with the first session's loads)",
                flush=True,
            )
            time.sleep(1)
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(10)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
