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


class KeepAlive:
    """The hub's keep-alive ticks of one stream it holds: a comment, in order with the
    stream's other messages (``lock``), written by a short task; ``then`` runs after the
    write. While a beat still runs (a slow client) a tick adds nothing (the stream is not
    quiet, and one waiting beat per stream is enough), and a finished one is let go: one
    slot per stream, not a set of tasks, as an idle stream should hold next to nothing."""

    __slots__ = ("_lock", "_responder", "_then", "task")

    def __init__(
        self, responder: Responder, lock: asyncio.Lock, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._responder = responder
        self._lock = lock
        self._then = then
        self.task: asyncio.Task[None] | None = None  # the beat being written

    def tick(self) -> None:
        if not self._responder.open or self.task is not None:
            return
        self.task = asyncio.ensure_future(_beat(self._responder, self._lock, self._then))
        self.task.add_done_callback(self._done)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _done(self, task: asyncio.Task[None]) -> None:
        if self.task is task:
            self.task = None


async def _beat(responder: Responder, lock: asyncio.Lock, then: Callable[[], Awaitable[None]] | None) -> None:
    async with lock:
        await responder.write(KEEPALIVE)
    if then is not None:
        await then()
