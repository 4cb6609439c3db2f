"""A graceful stop: this process's resumable SSE responses end with a retry hint.

When the server is asked to stop (SIGTERM, a rolling restart), it stops accepting
connections and waits for its requests to end, but an open SSE stream never would. So
each stream a client can resume with ``Last-Event-ID`` (a POST that went SSE, a resumed
stream, a standalone GET stream) is tracked here; ``drain`` gives each a last, empty event
with an id and ``retry``, stored in its log like a priming event, and ends the response.
The client reconnects (through the proxy, to a process that still runs) and loses nothing:
calls running here go on appending to their logs until they finish, and a background
call's worker never depended on this process.

Standalone GET streams are not tracked one by one: the process's stream hub holds them
already, and ``held`` lists them when the drain begins (an idle stream holds no entry here).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from mcp_platform.mcp.detached import detach
from mcp_platform.mcp.events import EventStore
from mcp_platform.mcp.transport import sse
from mcp_platform.mcp.transport.responder import Responder
from mcp_platform.mcp.versions import supports_priming

# How long a client waits before it resumes a stream the server ended on its way out.
DRAIN_RETRY_MS = 500


class Tracked(Protocol):
    """A stream to end: whose log its last event goes to."""

    @property
    def session_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    @property
    def protocol_version(self) -> str: ...


@dataclass(frozen=True)
class _Tracked:
    session_id: str
    stream_id: str
    protocol_version: str


class Drain:
    def __init__(self, events: EventStore, held: Callable[[], Iterable[tuple[Responder, Tracked]]] = tuple) -> None:
        """``held()``: the streams held elsewhere (the stream hub's) that a drain ends too."""
        self._events = events
        self._held = held
        self._open: weakref.WeakKeyDictionary[Responder, Tracked] = weakref.WeakKeyDictionary()
        self.draining = False

    def track(self, responder: Responder, session_id: str, stream_id: str, protocol_version: str) -> None:
        """Follow an SSE response (already started); one that starts while draining ends at once."""
        tracked = _Tracked(session_id, stream_id, protocol_version)
        if self.draining:
            detach(self._end([(responder, tracked)]))
        else:
            self._open[responder] = tracked

    def end_late(self, responder: Responder, stream: Tracked) -> None:
        """End a held stream that joined its holder once the drain had begun (the drain's
        ``held()`` did not list it)."""
        detach(self._end([(responder, stream)]))

    async def drain(self) -> None:
        self.draining = True
        await self._end([*self._open.items(), *self._held()])
        self._open.clear()

    async def _end(self, streams: list[tuple[Responder, Tracked]]) -> None:
        streams = [(responder, tracked) for responder, tracked in streams if responder.open]
        hinted = [(r, t) for r, t in streams if supports_priming(t.protocol_version)]
        event_ids = (
            await self._events.append_many([(t.session_id, t.stream_id, b"") for _, t in hinted]) if hinted else []
        )
        hints = {id(responder): event_id for (responder, _), event_id in zip(hinted, event_ids, strict=True)}
        await asyncio.gather(*(self._end_one(responder, hints.get(id(responder))) for responder, _ in streams))

    @staticmethod
    async def _end_one(responder: Responder, event_id: str | None) -> None:
        if event_id is not None:
            await responder.write(sse.event(b"", event_id=event_id, retry_ms=DRAIN_RETRY_MS))
        await responder.end()
