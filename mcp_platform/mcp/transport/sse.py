"""Server-Sent Events framing, and keep-alives: the loop of a stream that its request's
own coroutine serves, and the tick of a stream the hub holds (one timer per process)."""

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


class HeldStream:
    """Base of the streams the hub holds (which it ticks for keep-alives): the response, the
    lock that keeps its messages in order, and the keep-alive being written.

    A tick writes a comment, in order with the stream's other messages, in a short task;
    ``_after_beat`` runs after the write. While a beat still runs (a slow client) a tick adds
    nothing (the stream is not quiet, and one waiting beat per stream is enough), and a
    finished one is let go: one slot in the stream itself, no object or set of tasks of its
    own, as an idle stream should hold next to nothing."""

    __slots__ = ("_beat", "_responder", "_send_lock")

    def __init__(self, responder: Responder) -> None:
        self._responder = responder
        self._send_lock = asyncio.Lock()
        self._beat: asyncio.Task[None] | None = None  # the keep-alive being written

    def keep_alive(self) -> None:
        """The hub's keep-alive tick."""
        if not self._responder.open or self._beat is not None:
            return
        self._beat = asyncio.ensure_future(self._write_beat())
        self._beat.add_done_callback(self._beat_done)

    def _stop_beat(self) -> None:
        if self._beat is not None:
            self._beat.cancel()

    def _beat_done(self, task: asyncio.Task[None]) -> None:
        if self._beat is task:
            self._beat = None

    async def _write_beat(self) -> None:
        async with self._send_lock:
            await self._responder.write(KEEPALIVE)
        await self._after_beat()

    async def _after_beat(self) -> None:
        """What the stream does after each keep-alive it wrote (nothing, unless it says)."""
