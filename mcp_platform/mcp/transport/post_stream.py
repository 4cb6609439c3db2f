"""The stream of one POST: a JSON body if the response is all there is, else SSE."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.calls import Relayed
from mcp_platform.mcp.events import EventStore, StoredEvent
from mcp_platform.mcp.ids import UniqueIds
from mcp_platform.mcp.liveness import Producer, ProducerWatch
from mcp_platform.mcp.sessions import Session
from mcp_platform.mcp.transport import sse
from mcp_platform.mcp.transport.drain import Drain
from mcp_platform.mcp.transport.responder import Receive, Responder, watch_disconnect
from mcp_platform.mcp.versions import supports_priming

# How long a client waits before reconnecting after the server closed a stream early.
RETRY_MS = 1000
_stream_ids = UniqueIds("p")


@dataclass
class PostStream:
    """Messages of one POST: a JSON body if the response is all there is, else SSE.

    The decision is made lazily: the first message sent before the response opens an SSE
    stream (with a priming event for 2025-11-25 sessions). Every SSE event is stored, so
    the client can resume the stream with GET + Last-Event-ID from any server process,
    including after the server closed it early (SEP-1699 polling). Once SSE, the stream
    names this process as its producer (or the run it hands over to), so whoever the
    client resumes with can tell when the producer died (``liveness``).
    """

    responder: Responder
    receive: Receive
    events: EventStore
    session: Session
    keepalive_seconds: float
    watch: ProducerWatch
    drain: Drain
    # The requests this stream owes a response to, and whether they are tools/call.
    request_ids: tuple[jsonrpc.RequestId, ...] = ()
    tool_call: bool = False
    stream_id: str = field(default_factory=lambda: _stream_ids.next())
    _sse: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Only a stream that went SSE needs these: keep-alives, and noticing that the client left
    # (a JSON answer is one write; a client gone by then is noticed by that write).
    _companions: tuple[asyncio.Task[None], ...] = ()

    @property
    def session_id(self) -> str:
        return self.session.id

    async def open(self) -> str:
        """Start the SSE response now; the log position after which later events follow."""
        async with self._lock:
            return await self._ensure_sse() or "0-0"

    async def forward(self, event: StoredEvent) -> None:
        async with self._lock:
            await self.forward_locked(event)

    async def relay(self, after: str) -> Relayed:
        """Forward what another process appends to this stream's log after ``after``; returns
        at the final event (the response, which ``finish`` delivers), or once the response
        is closed (the client left, or this process is stopping): the rest stays in the log
        for the client that resumes."""

        async def watch() -> bool:
            await self.watch.check(self.session.id, self.stream_id)
            return not self.responder.open

        follow = self.events.follow(
            self.session.id, self.stream_id, after, watch=watch, watch_every=self.watch.interval
        )
        async for event in follow:
            if event.final:
                return Relayed(event)
            await self.forward(event)
            if not self.responder.open:
                break
        return Relayed(None)

    async def hand_over(self, run_id: str) -> None:
        """A worker produces the rest of this stream, as the run ``run_id``."""
        await self.watch.liveness.claim(
            self.session.id, self.stream_id, Producer(run_id=run_id), self.events.ttl_seconds
        )

    async def send(self, message: dict[str, Any]) -> None:
        async with self._lock:
            await self._ensure_sse()
            data = jsonrpc.dumps(message)
            event_id = await self.events.append(self.session.id, self.stream_id, data)
            await self.responder.write(sse.event(data, event_id=event_id))

    async def close_early(self) -> None:
        async with self._lock:
            await self._ensure_sse()
            await self.responder.end()

    async def finish(self, response: Any) -> None:
        """Deliver the final response(s) (None: nothing to answer, e.g. a cancelled call)."""
        async with self._lock:
            self.stop()
            if isinstance(response, Relayed):  # already in the log, written by a worker
                if response.final_event is not None:
                    await self.forward_locked(response.final_event)
                await self.responder.end()
                return
            if not self._sse:
                if response is None:
                    await self.responder.whole(202, b"", [])
                else:
                    await self.responder.json(200, response)
                return
            data = jsonrpc.dumps(response) if response is not None else b""
            event_id = await self.events.append(self.session.id, self.stream_id, data, final=True)
            if data:
                await self.responder.write(sse.event(data, event_id=event_id))
            await self.responder.end()

    async def forward_locked(self, event: StoredEvent) -> None:
        await self._ensure_sse()
        if event.data:
            await self.responder.write(sse.event(event.data, event_id=event.event_id))

    async def _ensure_sse(self) -> str | None:
        """Open the SSE response once; returns the priming event's log entry, if one was sent."""
        if self._sse:
            return None
        self._sse = True
        await self.responder.start(200, list(sse.HEADERS))
        self._companions = (
            asyncio.ensure_future(_keepalive(self.responder, self.keepalive_seconds)),
            asyncio.ensure_future(watch_disconnect(self.receive, self.responder)),
        )
        producer = Producer(
            process=self.watch.liveness.process_id, request_ids=self.request_ids, tool_call=self.tool_call
        )
        claim = self.watch.liveness.claim(self.session.id, self.stream_id, producer, self.events.ttl_seconds)
        if supports_priming(self.session.protocol_version):
            event_id, _ = await asyncio.gather(self.events.append(self.session.id, self.stream_id, b""), claim)
            await self.responder.write(sse.event(b"", event_id=event_id, retry_ms=RETRY_MS))
            self.drain.track(self.responder, self.session.id, self.stream_id, self.session.protocol_version)
            return event_id.split(".", 1)[1]
        await claim
        self.drain.track(self.responder, self.session.id, self.stream_id, self.session.protocol_version)
        return None

    def stop(self) -> None:
        for task in self._companions:
            task.cancel()


async def _keepalive(responder: Responder, interval: float) -> None:
    while responder.open:
        await asyncio.sleep(interval)
        await responder.write(sse.KEEPALIVE)
