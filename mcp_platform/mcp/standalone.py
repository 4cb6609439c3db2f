"""The standalone GET stream of a session: server-initiated messages unrelated to requests.

It is woken through the process's StreamHub. On a catalog change it re-checks the
credential (a revoked key ends the session) and the visible tool list, and appends
``notifications/tools/list_changed`` to the session's standalone event log only when
that list really changed for this credential. Whatever is new in the log (its own
notifications, task status from workers) is then sent, with ids a reconnecting client
can resume from.

The fingerprint the session was last told about is kept in Redis, so a change that
happened while no stream was open is announced when the client opens one again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from mcp_platform.mcp import jsonrpc, names, sse
from mcp_platform.mcp.host import Identity
from mcp_platform.mcp.responder import Receive, Responder, watch_disconnect
from mcp_platform.mcp.sessions import Session
from mcp_platform.mcp.versions import supports_priming

if TYPE_CHECKING:
    from mcp_platform.mcp.transport import StreamableHttp

STREAM_ID = "get"
LIST_CHANGED = jsonrpc.dumps(jsonrpc.notification("notifications/tools/list_changed"))
RETRY_MS = 1000


class StandaloneStream:
    def __init__(
        self,
        transport: StreamableHttp,
        session: Session,
        identity: Identity,
        responder: Responder,
        lock_key: str,
        resume_after: str | None = None,
    ) -> None:
        self._transport = transport
        self._session = session
        self._identity = identity
        self._responder = responder
        self._lock_key = lock_key
        self._resume_after = resume_after
        self._digest_key = names.session_digest_key(session.id)
        self.tenant_id = identity.tenant_id
        self.session_id = session.id
        self._wakeup = asyncio.Event()
        self._reasons: set[str] = set()
        self._last = "0-0"

    def wake(self, reason: str) -> None:
        self._reasons.add(reason)
        self._wakeup.set()

    async def run(self, receive: Receive) -> None:
        events = self._transport.events
        await self._responder.start(200, list(sse.HEADERS))
        if self._resume_after is not None:
            self._last = self._resume_after  # replay what the client missed, then go live
        else:
            newest = await events.after(self._session.id, STREAM_ID, "0-0")
            self._last = newest[-1].event_id.split(".", 1)[1] if newest else "0-0"
            if supports_priming(self._session.protocol_version):
                event_id = await events.append(self._session.id, STREAM_ID, b"")
                await self._responder.write(sse.event(b"", event_id=event_id, retry_ms=RETRY_MS))
                self._last = event_id.split(".", 1)[1]
        hub = self._transport.hub()
        await hub.register(self)  # before comparing: any later change wakes this stream
        await self._announce_if_changed()
        self.wake("events")
        tasks = [
            asyncio.ensure_future(coro)
            for coro in (self._serve(), self._beat(), watch_disconnect(receive, self._responder))
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await hub.unregister(self)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._responder.end()

    async def _announce_if_changed(self) -> None:
        """Append list_changed when the visible list differs from what the session last heard of."""
        fresh = await self._transport.engine.host.visible_digest(self._identity)
        idle = self._transport.engine.sessions.idle_seconds
        previous = await self._transport.redis.set(self._digest_key, fresh, ex=idle, get=True)
        if previous is not None and previous.decode() != fresh:
            await self._transport.events.append(self._session.id, STREAM_ID, LIST_CHANGED)

    async def _serve(self) -> None:
        engine, events = self._transport.engine, self._transport.events
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            reasons, self._reasons = self._reasons, set()
            if "ended" in reasons:
                return
            if "catalog" in reasons:
                current = await engine.host.revalidate(self._identity)
                if current is None:
                    # The credential is gone: so is its session.
                    await engine.sessions.delete(self._session)
                    return
                self._identity = current
                await self._announce_if_changed()
            for event in await events.after(self._session.id, STREAM_ID, self._last):
                self._last = event.event_id.split(".", 1)[1]
                if event.data:
                    await self._responder.write(sse.event(event.data, event_id=event.event_id))

    async def _beat(self) -> None:
        while self._responder.open:
            await asyncio.sleep(self._transport.config.keepalive_seconds)
            await self._responder.write(sse.KEEPALIVE)
            await self._transport.redis.expire(self._lock_key, 60)
