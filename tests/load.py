"""The load the live availability tests (a rolling restart, nginx in front of the Procfile)
put on a deployment while they restart its servers: SDK clients that call the demo tenant's
tools in turn until told to stop, and count what they saw."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client


@dataclass
class Tally:
    answered: int = 0
    errors: list[str] = field(default_factory=list)


async def call_until_stopped(
    url: str, http: httpx2.AsyncClient, label: str, stop: asyncio.Event, tally: Tally, *, countdown: int, count: int
) -> None:
    """Calls countdown (progress on an SSE stream), echo (a JSON answer) and slow_count (on a
    worker, relayed on an SSE stream) in turn, over 2025-11-25, until ``stop`` is set."""
    try:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            n = 0
            while not stop.is_set():
                n += 1
                if n % 3 == 1:
                    result = await client.call_tool("countdown", {"n": countdown})
                    expected = f"Countdown from {countdown} finished."
                elif n % 3 == 2:
                    result = await client.call_tool("echo", {"text": f"{label}-{n}"})
                    expected = f"{label}-{n}"
                else:
                    result = await client.call_tool("slow_count", {"count": count})
                    expected = f"Counted to {count}."
                text = result.content[0].text  # type: ignore[union-attr]
                if result.is_error or text != expected:
                    tally.errors.append(f"{label} call {n}: {text}")
                else:
                    tally.answered += 1
    except Exception as exc:  # a client-visible error is what these tests count
        tally.errors.append(f"{label}: {exc!r}")
