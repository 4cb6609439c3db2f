"""The standalone GET stream of a session: server-initiated messages unrelated to requests.

A catalog change reaches the process's StreamHub once; ``catalog_round`` then handles all
of the affected streams here together: one shared credential check, the fingerprints of
the visible tools, resources (with templates) and prompts compared in memory, and batched
Redis writes for the sessions whose lists really changed (``notifications/tools/list_changed``,
``…/resources/list_changed`` or ``…/prompts/list_changed``, each only for its own list, goes
into the session's standalone event log and out on its stream). A revoked credential ends
its session. ``resource_round`` does the same for a resource whose content changed: the
sessions subscribed to its URI that may still read it get ``notifications/resources/updated``.
Other messages for the stream (task status from workers) are read from the same log when
the hub says so.

The fingerprints a session was last told about are kept in Redis, so a change that
happened while no stream was open is announced when the client opens one again.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.events import EventStore, StoredEvent
from mcp_platform.mcp.features import RESOURCE_UPDATED, changed_lists, encode_digests
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.sessions import Session, SessionStore
from mcp_platform.mcp.transport import sse
from mcp_platform.mcp.transport.drain import Drain
from mcp_platform.mcp.transport.hub import StreamHub
from mcp_platform.mcp.transport.listen import ListenStream
from mcp_platform.mcp.transport.post_stream import RETRY_MS
from mcp_platform.mcp.transport.responder import Responder
from mcp_platform.mcp.versions import supports_priming
from mcp_platform.metrics import LIST_CHANGED_SENT

STREAM_ID = names.STANDALONE_STREAM
# The session's one-GET-stream lock lives this long unless the open stream renews it (each
# keep-alive), so a process that died holding it frees it soon.
STREAM_LOCK_SECONDS = 60
# Numbers the streams of this process for their lock's value (``StandaloneStream.holder``).
_HOLDERS = itertools.count(1)


def _notification(method: str, params: dict[str, Any] | None = None) -> bytes:
    return jsonrpc.dumps(jsonrpc.notification(method, params))


@dataclass(frozen=True)
class StreamServices:
    """What standalone streams use of the process: the host, the stores, the keep-alive pace
    and the drain that ends them when the process stops."""

    host: ToolHost[Any]
    sessions: SessionStore
    events: EventStore
    keepalive_seconds: float
    drain: Drain


def _entry(event_id: str) -> tuple[int, int]:
    """A Redis stream entry id ("<ms>-<seq>", after the "<stream>." prefix) as a sortable pair."""
    ms, _, seq = event_id.rsplit(".", 1)[-1].partition("-")
    return int(ms), int(seq)


class StandaloneStream(sse.HeldStream):
    """One session's GET stream. An idle stream is only its request's own coroutine waiting
    for the client to leave: no task or timer of its own (the hub sends keep-alives), and of
    its session only what it uses (ids, protocol version). Deliveries run in a short task
    when the hub wakes the stream; an end (revoked credential, ended session) interrupts the
    waiting coroutine."""

    # Many of these stay open for hours: no per-instance dict, and no field that is not used.
    __slots__ = (
        "_again",
        "_delivering",
        "_ending",
        "_holder",
        "_hub",
        "_resume_after",
        "_task",
        "digest",
        "drainable",
        "identity",
        "last",
        "protocol_version",
        "services",
        "session_id",
        "tenant_id",
    )
    stream_id = STREAM_ID  # the log its events are stored in (for the drain)

    def __init__(
        self,
        services: StreamServices,
        hub: StreamHub,
        session: Session,
        identity: Identity,
        responder: Responder,
        resume_after: str | None = None,
    ) -> None:
        super().__init__(responder)
        self.services = services
        self._hub = hub
        self.session_id = sys.intern(session.id)  # one copy with SessionStore's last-touched entry
        self.tenant_id = identity.tenant_id
        self.protocol_version = sys.intern(session.protocol_version)  # one copy for the process
        self.identity = identity
        self._resume_after = resume_after
        self._holder = next(_HOLDERS)
        self.digest = ""
        self.last = "0-0"
        self.drainable = False  # joined the hub before the drain began: the drain ends it
        self._task: asyncio.Task[Any] | None = None  # the request's coroutine, while it waits
        self._ending: str | None = None  # "ended" or "revoked" once the stream must end
        self._delivering: asyncio.Task[None] | None = None
        self._again = False  # woken again while delivering

    @property
    def responder(self) -> Responder:
        return self._responder

    @property
    def holder(self) -> str:
        """Its value of the session's one-GET-stream lock: this process and stream."""
        return f"{socket.gethostname()}:{os.getpid()}:{self._holder}"

    async def claim(self) -> bool:
        """Take the session's one-GET-stream lock; False while another stream holds it. A
        stream that took it gives it back when ``run`` ends."""
        return await self.services.sessions.claim_stream(self.session_id, self.holder, seconds=STREAM_LOCK_SECONDS)

    def follows_task(self, task_id: str) -> bool:
        """Legacy tasks report on the session's own log (``session.events``), not by id."""
        return False

    def wake(self, reason: str) -> None:
        if reason in ("ended", "revoked"):
            if self._ending is None:
                self._ending = reason
                if self._task is not None:
                    self._task.cancel()  # stop waiting for the client; run() ends the stream
            return
        if self._delivering is None or self._delivering.done():
            self._delivering = asyncio.ensure_future(self._deliver_new())
        else:
            self._again = True

    async def run(self) -> None:
        """Serve the claimed stream until the client leaves or ``wake`` ends it, then give the
        lock back. The waiting happens here, one frame above the ASGI server's ``receive``:
        what opening the stream needed went with the frames of ``_start`` and ``_join``."""
        responder = self._responder
        task = asyncio.current_task()
        assert task is not None
        try:
            await self._start()  # a failure here is answered by the transport, on the stream
            try:
                await self._join()
                self._task = task
                try:
                    if self._ending is None:
                        while (await responder.receive())["type"] != "http.disconnect":
                            pass
                        responder.disconnected = True
                except asyncio.CancelledError:
                    if self._ending is None:
                        raise  # cancelled from outside (the server is stopping)
                    task.uncancel()  # our own interruption, handled
                finally:
                    self._task = None
                if self._ending == "revoked":  # the credential is gone: so is its session
                    await self.services.sessions.delete(self.session_id, self.tenant_id)
            finally:
                self._stop_beat()
                if self._delivering is not None:
                    self._delivering.cancel()
                await self._hub.unregister(self)
                await responder.end()
        finally:
            await self.services.sessions.release_stream(self.session_id, self.holder)

    async def _start(self) -> None:
        """Start the response: primed, or replaying what the client missed (``Last-Event-ID``)."""
        events = self.services.events
        await self._responder.start(200, list(sse.HEADERS))
        if self._resume_after is not None:
            self.last, self._resume_after = self._resume_after, None  # replay, then go live
            return
        newest = await events.after(self.session_id, STREAM_ID, "0-0")
        self.last = newest[-1].event_id.split(".", 1)[1] if newest else "0-0"
        if supports_priming(self.protocol_version):
            event_id = await events.append(self.session_id, STREAM_ID, b"")
            await self._responder.write(sse.event(b"", event_id=event_id, retry_ms=RETRY_MS))
            self.last = event_id.split(".", 1)[1]

    async def _join(self) -> None:
        """Join the hub, then announce a change the session has not heard of yet."""
        drain = self.services.drain
        await self._hub.register(self)  # before comparing: any later change wakes this stream
        # In one turn with the drain's look at the hub: exactly one of the two ends the stream.
        if drain.draining:
            drain.end_late(self._responder, self)
        else:
            self.drainable = True
        await self._announce_if_changed()
        self.wake("events")

    async def _deliver_new(self) -> None:
        while True:
            self._again = False
            await self.deliver(await self.services.events.after(self.session_id, STREAM_ID, self.last))
            if not self._again:
                self._delivering = None
                return

    async def deliver(self, events: list[StoredEvent]) -> None:
        """Send stored events newer than the last one sent, in order, each once."""
        async with self._send_lock:
            for event in events:
                if _entry(event.event_id) <= _entry(self.last):
                    continue
                self.last = event.event_id.split(".", 1)[1]
                if event.data:
                    await self._responder.write(sse.event(event.data, event_id=event.event_id))

    async def _announce_if_changed(self) -> None:
        """On (re)connect: announce a change the session has not heard of yet."""
        digests = await self.services.host.visible_digests(self.identity)
        fresh = encode_digests(digests)
        (previous,) = await self.services.sessions.swap_digests([(self.session_id, fresh)])
        self.digest = sys.intern(fresh)  # a tenant's sessions hold one copy
        for method in changed_lists(previous.decode() if previous is not None else None, digests):
            await self.services.events.append(self.session_id, STREAM_ID, _notification(method))

    async def _after_beat(self) -> None:
        """Each keep-alive also renews the session's one-GET-stream lock. A stream that lost
        it (its process stalled past the lock's life, and the client opened another stream
        meanwhile) ends: the session keeps one stream, the newer one."""
        if not await self.services.sessions.renew_stream(self.session_id, self.holder, seconds=STREAM_LOCK_SECONDS):
            self.wake("ended")


async def catalog_round(services: StreamServices, streams: list[StandaloneStream | ListenStream]) -> None:
    """Handle one catalog change for a batch of this process's streams.

    Round trips do not grow with the number of streams: one revalidation per distinct
    credential (sharing one generation check), then for the sessions whose visible list
    moved, one pipeline for their remembered fingerprints and one that appends the new
    events and reads them back.
    """
    host = services.host
    listeners = [stream for stream in streams if isinstance(stream, ListenStream)]
    if listeners:  # 2026-07-28 listen streams keep their fingerprints themselves: no batching needed
        await asyncio.gather(*(listener.refresh() for listener in listeners))
    sessions = [stream for stream in streams if isinstance(stream, StandaloneStream)]
    identities = await _revalidated(host, [stream.identity for stream in sessions])
    # (stream, its fingerprints now, what it held before): the stored fingerprint decides,
    # the one in memory stands in when Redis lost it.
    moved: list[tuple[StandaloneStream, Mapping[str, str], str]] = []
    for stream, identity in zip(sessions, identities, strict=True):
        if identity is None:
            stream.wake("revoked")
            continue
        stream.identity = identity
        digests = await host.visible_digests(identity)  # in memory once the catalog is loaded
        fresh = encode_digests(digests)
        if fresh != stream.digest:
            moved.append((stream, digests, stream.digest))
            stream.digest = sys.intern(fresh)  # a tenant's sessions hold one copy
    if not moved:
        return
    previous = await services.sessions.swap_digests([(stream.session_id, stream.digest) for stream, _, _ in moved])
    appends: list[tuple[str, str, bytes]] = []
    told: list[StandaloneStream] = []
    for (stream, digests, in_memory), old in zip(moved, previous, strict=True):
        methods = changed_lists(old.decode() if old is not None else in_memory, digests)
        if methods:
            told.append(stream)
            appends += [(stream.session_id, STREAM_ID, _notification(method)) for method in methods]
    if not told:
        return
    pending = await services.events.append_and_read(
        appends, [(stream.session_id, STREAM_ID, stream.last) for stream in told]
    )
    LIST_CHANGED_SENT.inc(len(appends))
    await asyncio.gather(*(stream.deliver(events) for stream, events in zip(told, pending, strict=True)))


async def _revalidated(host: Any, identities: list[Any]) -> list[Any]:
    """``host.revalidate`` for each identity, once per distinct credential: a thousand sessions
    of one key cost one check, not a thousand. An equal identity shares the verdict; a
    session keeps its own identity object when the check leaves it unchanged (fields that
    equality ignores, such as an OAuth caller's token, stay its own), and one whose
    credential changed is checked on its own."""
    distinct = list(dict.fromkeys(identities))
    checked = dict(zip(distinct, await asyncio.gather(*(host.revalidate(i) for i in distinct)), strict=True))
    results: list[Any] = []
    own: list[int] = []
    for index, identity in enumerate(identities):
        now = checked[identity]
        if now is None or now == identity:
            results.append(None if now is None else identity)
        else:
            results.append(None)
            own.append(index)
    if own:
        for index, now in zip(own, await asyncio.gather(*(host.revalidate(identities[i]) for i in own)), strict=True):
            results[index] = now
    return results


async def _deliver_pending(services: StreamServices, streams: list[StandaloneStream]) -> None:
    pending = await services.events.after_many([(stream.session_id, STREAM_ID, stream.last) for stream in streams])
    await asyncio.gather(*(stream.deliver(events) for stream, events in zip(streams, pending, strict=True)))


async def resource_round(services: StreamServices, streams: list[StandaloneStream | ListenStream], uri: str) -> None:
    """Tell the sessions among ``streams`` that subscribed to ``uri`` that its content changed
    (one pipeline for the subscriptions, one for the events); a session that may no longer
    read it is not told. Listen streams hold their subscriptions themselves."""
    listeners = [stream for stream in streams if isinstance(stream, ListenStream)]
    if listeners:
        await asyncio.gather(*(listener.resource_updated(uri) for listener in listeners))
    sessions = [stream for stream in streams if isinstance(stream, StandaloneStream)]
    subscribed = await services.sessions.subscribed([stream.session_id for stream in sessions], uri)
    candidates = [stream for stream, yes in zip(sessions, subscribed, strict=True) if yes]
    allowed = await asyncio.gather(*(services.host.resource_exists(s.identity, uri) for s in candidates))
    told = [stream for stream, ok in zip(candidates, allowed, strict=True) if ok]
    if not told:
        return
    event = _notification(RESOURCE_UPDATED, {"uri": uri})
    await services.events.append_many([(stream.session_id, STREAM_ID, event) for stream in told])
    await _deliver_pending(services, told)
