"""The answer stream of one POST, on either revision: a JSON body if the response is all
there is, else SSE."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.calls import Relayed
from mcp_platform.mcp.events import EventStore, StoredEvent
from mcp_platform.mcp.ids import UniqueIds
from mcp_platform.mcp.liveness import Producer, ProducerWatch
from mcp_platform.mcp.transport import sse
from mcp_platform.mcp.transport.drain import Drain
from mcp_platform.mcp.transport.responder import Responder, watch_disconnect
from mcp_platform.mcp.versions import supports_priming

# How long a client waits before reconnecting after the server closed a stream early.
RETRY_MS = 1000
# A request whose client leaving cancels it is watched for that once it has run this long
# (short requests never start the watch).
WATCH_AFTER_SECONDS = 0.05
_stream_ids = UniqueIds("p")


@dataclass(frozen=True)
class StreamOptions:
    """What the answer streams of one transport share: the stores, the producer watch, the
    drain, the keep-alive pace, and how the revision treats a stream.

    ``resumable`` (2025-11-25 and earlier): every SSE event is stored with an id, so the
    client can resume the stream with GET + Last-Event-ID from any server process, also
    after the server closed it early (SEP-1699 polling); the stream names this process as
    its producer (or the run it hands over to), so whoever the client resumes with can tell
    when the producer died (``liveness``), and the drain ends it when the process stops.
    Otherwise (2026-07-28) there are no event ids and nothing is kept for resuming: a
    background call's worker writes to an event log that only this request reads.

    ``cancel_on_disconnect`` (2026-07-28): a client that closes the stream cancels its
    request (the callbacks given to ``on_disconnect``), and a relay goes on to the call's
    end, which the cancelled worker writes. Otherwise a client that leaves does not cancel
    the call: its result is stored for resumption.
    """

    events: EventStore
    watch: ProducerWatch
    drain: Drain
    keepalive_seconds: float
    resumable: bool
    cancel_on_disconnect: bool


@dataclass
class PostStream:
    """Messages of one POST: a JSON body if the response is all there is, else SSE.

    The decision is made lazily: the first message sent before the response opens an SSE
    stream (with a priming event for resumable 2025-11-25 sessions).
    """

    responder: Responder
    options: StreamOptions
    session_id: str
    # The session's revision (whether it understands priming events), on a resumable stream.
    protocol_version: str = ""
    # The requests this stream owes a response to, and whether they are tools/call.
    request_ids: tuple[jsonrpc.RequestId, ...] = ()
    tool_call: bool = False
    stream_id: str = field(default_factory=_stream_ids.next)
    _sse: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Only a stream that went SSE, or whose client leaving cancels it, needs these:
    # keep-alives and noticing that the client left (a JSON answer is one write; a client
    # gone by then is noticed by that write). Tuples: most requests never add one.
    _tasks: tuple[asyncio.Task[None], ...] = ()
    _on_disconnect: tuple[Callable[[], None], ...] = ()
    _watching: bool = False
    _timer: asyncio.TimerHandle | None = None

    @property
    def cancel_on_disconnect(self) -> bool:
        return self.options.cancel_on_disconnect

    async def open(self, run_id: str | None = None) -> str:
        """Start the SSE response now; the log position after which later events follow.

        ``run_id``: a worker produces the rest of this stream, as that run; the stream names
        it as its producer before a worker can take it (the worker then names itself), so
        its death or overrun is noticed while this relays. Named by the claim that opens
        the stream, when there is one: one write, not this process's name and then the run's.
        """
        async with self._lock:
            producer = None if run_id is None else Producer(run_id=run_id)
            claims = not self._sse and self.options.resumable
            after = await self._ensure_sse(producer)
            if producer is not None and not claims:
                await self._claim(producer)
            return after or "0-0"

    async def send(self, message: dict[str, Any]) -> None:
        async with self._lock:
            await self._ensure_sse()
            data = jsonrpc.dumps(message)
            event_id = None
            if self.options.resumable:
                event_id = await self.options.events.append(self.session_id, self.stream_id, data)
            await self.responder.write(sse.event(data, event_id=event_id))

    async def close_early(self) -> None:
        """End the response now; later messages wait in the event store for the client that
        resumes. Nothing on a stream that cannot be resumed: the answer would be lost."""
        if not self.options.resumable:
            return
        async with self._lock:
            await self._ensure_sse()
            await self.responder.end()

    async def forward(self, event: StoredEvent) -> None:
        async with self._lock:
            await self.forward_locked(event)

    async def relay(self, after: str) -> Relayed:
        """Forward what another process appends to this stream's log after ``after``; returns
        at the final event (the response, which ``finish`` delivers), or once the response
        is closed and the client's leaving did not cancel the call (it left, or this process
        is stopping): the rest stays in the log for the client that resumes."""
        options = self.options

        async def watch() -> bool:
            await options.watch.check(self.session_id, self.stream_id)
            return self._given_up()

        follow = options.events.follow(
            self.session_id, self.stream_id, after, watch=watch, watch_every=options.watch.interval
        )
        async for event in follow:
            if event.final:
                return Relayed(event)
            await self.forward(event)
            if self._given_up():
                break
        return Relayed(None)

    def _given_up(self) -> bool:
        return not self.options.cancel_on_disconnect and not self.responder.open

    def _claim(self, producer: Producer) -> Awaitable[None]:
        options = self.options
        return options.watch.liveness.claim(self.session_id, self.stream_id, producer, options.events.ttl_seconds)

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client closes the stream (watched from the SSE switch,
        or from ``WATCH_AFTER_SECONDS`` on)."""
        self._on_disconnect = (*self._on_disconnect, callback)
        if self._timer is None and not self._watching:
            self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_SECONDS, self._watch)

    def _watch(self) -> None:
        self._timer = None
        self._watching = True
        self._tasks = (*self._tasks, asyncio.ensure_future(self._disconnected()))

    async def _disconnected(self) -> None:
        await watch_disconnect(self.responder)
        for callback in self._on_disconnect:
            callback()

    async def finish(self, response: Any, status: int = 200) -> None:
        """Deliver the final response(s) (None: nothing to answer, e.g. a cancelled call),
        as JSON with ``status`` unless the stream went SSE."""
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
                    await self.responder.json(status, response)
                return
            data = jsonrpc.dumps(response) if response is not None else b""
            event_id = None
            if self.options.resumable:
                event_id = await self.options.events.append(self.session_id, self.stream_id, data, final=True)
            if data:
                await self.responder.write(sse.event(data, event_id=event_id))
            await self.responder.end()

    async def forward_locked(self, event: StoredEvent) -> None:
        await self._ensure_sse()
        if event.data:
            event_id = event.event_id if self.options.resumable else None
            await self.responder.write(sse.event(event.data, event_id=event_id))

    async def _ensure_sse(self, producer: Producer | None = None) -> str | None:
        """Open the SSE response once; returns the priming event's log entry, if one was sent.
        A resumable stream names its producer: ``producer``, or this process."""
        if self._sse:
            return None
        self._sse = True
        options = self.options
        await self.responder.start(200, list(sse.HEADERS))
        self._tasks = (*self._tasks, asyncio.ensure_future(sse.keep_alive(self.responder, options.keepalive_seconds)))
        if not self._watching and self._timer is None and (options.resumable or self._on_disconnect):
            self._watch()
        if not options.resumable:
            return None
        if producer is None:
            producer = Producer(
                process=options.watch.liveness.process_id, request_ids=self.request_ids, tool_call=self.tool_call
            )
        claim = self._claim(producer)
        if supports_priming(self.protocol_version):
            event_id, _ = await asyncio.gather(options.events.append(self.session_id, self.stream_id, b""), claim)
            await self.responder.write(sse.event(b"", event_id=event_id, retry_ms=RETRY_MS))
            options.drain.track(self.responder, self.session_id, self.stream_id, self.protocol_version)
            return event_id.split(".", 1)[1]
        await claim
        options.drain.track(self.responder, self.session_id, self.stream_id, self.protocol_version)
        return None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._tasks:
            task.cancel()
