"""Server-Sent Events framing, and the keep-alive of a stream that the request's own
coroutine writes (streams the hub holds get theirs from the hub's tick)."""

from __future__ import annotations

import asyncio

from mcp_platform.mcp.transport.responder import Responder

KEEPALIVE = b": keepalive\n\n"

HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def event(data: bytes, *, event_id: str | None = None, retry_ms: int | None = None) -> bytes:
    """One event. ``data`` is one JSON message on one line, or empty for a priming event."""
    parts = []
    if event_id is not None:
        parts.append(b"id: " + event_id.encode("ascii"))
    if retry_ms is not None:
        parts.append(b"retry: " + str(retry_ms).encode("ascii"))
    if data:
        parts.append(b"event: message")
    parts.append(b"data: " + data)
    return b"\n".join(parts) + b"\n\n"


async def keep_alive(responder: Responder, interval: float) -> None:
    """A comment every ``interval`` seconds while the response is open, so that proxies and
    clients do not take a quiet stream for a dead one."""
    while responder.open:
        await asyncio.sleep(interval)
        await responder.write(KEEPALIVE)
