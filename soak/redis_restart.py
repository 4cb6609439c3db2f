"""Redis killed and restarted, again and again, under load: what clients see.

    python -m soak.redis_restart [--seconds 60] [--clients 8] [--cycles 3] [--down 3]

Starts a private redis-server (no persistence) on a free port, a throw-away SQLite
database with the demo seeded, and one uvicorn process; clients call ``echo`` back to back
on the 2026-07-28 leg (every request stands alone, so Redis coming back empty loses
nothing a client needs). ``--cycles`` times, Redis is SIGKILLed, left down ``--down``
seconds and started again on the same port. Prints the answers per phase and fails (exit
1) when a client saw anything but 200, or a 503 with Retry-After and a JSON-RPC body while
Redis was down, or anything but 200 once Redis answered again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import redis

from bench.echo_bench import ROOT, free_port, prepare, production_settings, start

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


class PrivateRedis:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # redis-server starting

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


class Tally:
    """Answers per phase. A request under way while the phase changed (Redis killed or
    back while it was in flight) counts under "transition": it may go either way."""

    def __init__(self) -> None:
        self.phase = "up"
        self.changes = 0
        self.answers: Counter[tuple[str, str]] = Counter()
        self.bad: list[str] = []

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.changes += 1

    def file(self, phase: str, response: httpx.Response) -> None:
        if response.status_code == 200 and "result" in response.json():
            self.answers[(phase, "200")] += 1
            return
        body = response.json()
        proper = (
            response.status_code == 503
            and response.headers.get("retry-after")
            and body.get("error", {}).get("code") == -32000
        )
        self.answers[(phase, "503" if proper else str(response.status_code))] += 1
        if not proper or phase == "back":
            self.bad.append(f"{phase}: {response.status_code} {response.text[:200]}")


async def client(url: str, key: str, tally: Tally, stop_at: float, label: int) -> None:
    head = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    async with httpx.AsyncClient(timeout=30) as http:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            phase, changes = tally.phase, tally.changes
            body = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": f"{label}-{n}"}, "_meta": META},
            }
            try:
                response = await http.post(url, json=body, headers=head)
            except httpx.HTTPError as exc:
                tally.answers[(phase, "transport error")] += 1
                tally.bad.append(f"{phase}: {exc!r}")
                continue
            tally.file(phase if tally.changes == changes else "transition", response)


async def outages(private: PrivateRedis, tally: Tally, cycles: int, down: float, every: float) -> None:
    for _ in range(cycles):
        await asyncio.sleep(every)  # load runs with Redis up
        tally.enter("killing")
        private.kill()
        tally.enter("down")
        await asyncio.sleep(down)  # Redis stays down this long
        tally.enter("restarting")
        await asyncio.to_thread(private.start)
        tally.enter("back")


async def run(url: str, key: str, private: PrivateRedis, args: argparse.Namespace) -> Tally:
    tally = Tally()
    stop_at = time.monotonic() + args.seconds
    every = max(1.0, args.seconds / (args.cycles + 1) - args.down)
    await asyncio.gather(
        outages(private, tally, args.cycles, args.down, every),
        *(client(url, key, tally, stop_at, n) for n in range(args.clients)),
    )
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--down", type=float, default=3.0)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="toolbay-soak-"))
    private = PrivateRedis(tmp)
    private.start()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        **production_settings(),
        "DATABASE_URL": f"sqlite:///{tmp / 'soak.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{private.port}/0",
        "CHANNEL_LAYER_PREFIX": "toolbay-soak:asgi",
        "LOG_LEVEL": "WARNING",
        "TOOLBAY_RETRY_AFTER_SECONDS": "1",
    }
    server = None
    try:
        key = prepare(env)
        server, url = start("uvicorn", "mcp_platform.asgi:application", env)
        started = time.monotonic()
        tally = asyncio.run(run(url + "/mcp/demo", key, private, args))
        elapsed = time.monotonic() - started
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        private.kill()
    print(f"redis_restart: {args.clients} clients, {args.cycles} Redis kills ({args.down:g} s down), {elapsed:.0f} s")
    for phase in ("up", "killing", "down", "restarting", "back", "transition"):
        seen = {status: count for (p, status), count in sorted(tally.answers.items()) if p == phase}
        print(f"  {phase:>10}: {seen}")
    after = sum(count for (p, status), count in tally.answers.items() if p == "back" and status != "200")
    improper = [line for line in tally.bad if not line.startswith("back")]
    print(f"  errors once Redis was back: {after}; answers other than 200 or a proper 503: {len(improper)}")
    for line in tally.bad[:10]:
        print(f"    {line}")
    sys.exit(1 if tally.bad else 0)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
