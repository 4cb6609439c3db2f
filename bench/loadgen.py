"""A minimal keep-alive HTTP/1.1 load generator for MCP endpoints.

Each simulated client holds one TCP connection and one MCP session and sends requests
back to back. Responses must carry Content-Length (Toolbay's JSON answers do), which
keeps the client cheap enough that the server, not the generator, is what is measured.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class LoadResult:
    clients: int
    calls: int
    seconds: float
    latencies_ms: list[float]
    # Every request sent, warm-up and handshakes included (what a server's CPU time covers).
    requests: int = 0

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")

    def summary(self) -> dict[str, float]:
        return {
            "clients": self.clients,
            "calls": self.calls,
            "calls_per_s": round(self.rate, 1),
            "p50_ms": round(self.percentile(0.50), 2),
            "p99_ms": round(self.percentile(0.99), 2),
            "mean_ms": round(statistics.fmean(self.latencies_ms), 2) if self.latencies_ms else 0.0,
        }


class Connection:
    def __init__(self, url: str, key: str | None) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.key = key
        self.session: str | None = None
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, body: dict) -> tuple[int, dict[str, str], bytes]:
        payload = json.dumps(body).encode()
        lines = [
            f"POST {self.path} HTTP/1.1",
            f"Host: localhost:{self.port}",
            "Content-Type: application/json",
            "Accept: application/json, text/event-stream",
            f"Content-Length: {len(payload)}",
        ]
        if self.key:
            lines.append(f"Authorization: Bearer {self.key}")
        if self.session:
            lines += [f"Mcp-Session-Id: {self.session}", "MCP-Protocol-Version: 2025-11-25"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            data = await self.reader.readexactly(int(headers["content-length"]))
        else:  # chunked (SSE); read to the terminating chunk
            chunks = []
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            data = b"".join(chunks)
        return status, headers, data

    async def initialize(self) -> None:
        status, headers, _ = await self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            }
        )
        if status != 200:
            raise RuntimeError(f"initialize answered {status}")
        self.session = headers.get("mcp-session-id")
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        self.writer.close()


async def run_load(
    url: str | Sequence[str],
    key: str | None,
    clients: int,
    seconds: float,
    body: dict,
    *,
    mcp: bool = True,
    warmup: float = 1.0,
) -> LoadResult:
    """``clients`` sessions sending ``body`` back to back; given several URLs (server
    processes), the sessions are spread over them in turn."""
    urls = [url] if isinstance(url, str) else list(url)
    connections = [Connection(urls[i % len(urls)], key) for i in range(clients)]
    for conn in connections:
        await conn.open()
        if mcp:
            await conn.initialize()
    latencies: list[float] = []
    calls = 0
    requests = 2 * clients if mcp else 0  # initialize + notifications/initialized
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + seconds

    async def worker(conn: Connection) -> None:
        nonlocal calls, requests
        request_id = 1
        while (now := time.perf_counter()) < stop_at:
            request_id += 1
            status, _, data = await conn.post({**body, "id": request_id})
            requests += 1
            if status != 200 or b'"error"' in data or b'"isError":true' in data:
                raise RuntimeError(f"bad answer {status}: {data[:200]!r}")
            if now >= measure_from:
                latencies.append((time.perf_counter() - now) * 1000)
                calls += 1

    await asyncio.gather(*(worker(c) for c in connections))
    for conn in connections:
        conn.close()
    return LoadResult(clients, calls, seconds, latencies, requests)
