"""Server-Sent Events framing, and keep-alives: the loop of a stream that its request's
own coroutine serves, and the tick of a stream the hub holds (one timer per process)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

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


def keep_alive_soon(
    responder: Responder,
    lock: asyncio.Lock,
    beat: asyncio.Task[None] | None,
    then: Callable[[], Awaitable[None]] | None = None,
) -> asyncio.Task[None] | None:
    """The hub's keep-alive tick for a stream it holds: a comment, in order with the
    stream's other messages (``lock``), written by a short task; ``then`` runs after the
    write. ``beat`` is the stream's previous one: while it still runs (a slow client), this
    tick adds nothing (the stream is not quiet, and one waiting beat per stream is enough).
    Returns the beat the stream keeps (and cancels when it ends): one slot per stream, not
    a set of tasks, as an idle stream should hold next to nothing."""
    if not responder.open or (beat is not None and not beat.done()):
        return beat
    return asyncio.ensure_future(_beat(responder, lock, then))


async def _beat(responder: Responder, lock: asyncio.Lock, then: Callable[[], Awaitable[None]] | None) -> None:
    async with lock:
        await responder.write(KEEPALIVE)
    if then is not None:
        await then()
