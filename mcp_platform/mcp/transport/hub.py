"""One hub per ASGI process: the channel-layer presence of the streams this process holds.

A change to a tenant's catalog is one channel-layer message per *process* (to the groups
``mcp.catalog.all`` and ``mcp.tenant.<id>``), not per session; the hub then wakes the
standalone GET streams it holds for that tenant, in memory. The hub joins a tenant's
group while it holds at least one of the tenant's streams.

Messages (``mcp_platform.mcp.messages``), each handled by the method of its name:
- ``catalog.changed`` {tenant_id | None}: re-check visible tools (None: every tenant), in
  one batched round for all of the tenant's streams here.
- ``resource.updated`` {tenant_id | None, uri}: a resource's content changed; the sessions
  subscribed to it hear of it (one batched round, like a catalog change).
- ``session.events`` {tenant_id, session_id}: new events in that session's standalone log.
- ``session.ended`` {tenant_id, session_id}: an operator ended the session; close its stream.
- ``task.changed`` {tenant_id, task_id}: a 2026-07-28 task moved; listen streams that follow
  it (``taskIds``) tell their client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from mcp_platform.mcp import messages, names

log = logging.getLogger(__name__)

# A stream woken for a task hears this reason, followed by the task's id.
TASK_REASON = "task:"
# channels-redis forgets group members after a day; hubs renew well before that.
GROUP_RENEW_SECONDS = 600.0


class HubStream(Protocol):
    tenant_id: int
    session_id: str

    def wake(self, reason: str) -> None: ...

    def follows_task(self, task_id: str) -> bool: ...

    def keep_alive(self) -> None:
        """Send a keep-alive comment soon (without waiting for it)."""


class Layer(Protocol):
    async def new_channel(self, prefix: str = ...) -> str: ...

    async def receive(self, channel: str) -> dict[str, Any]: ...

    async def group_add(self, group: str, channel: str) -> None: ...

    async def group_discard(self, group: str, channel: str) -> None: ...


class StreamHub:
    def __init__(
        self,
        layer: Layer,
        on_catalog_change: Callable[[list[Any]], Awaitable[None]],
        on_resource_updated: Callable[[list[Any], str], Awaitable[None]] | None = None,
        *,
        keepalive_seconds: float = 15.0,
    ) -> None:
        """``on_catalog_change(streams)`` handles a change for a batch of this process's
        streams at once (one round, batched I/O), instead of each stream on its own;
        ``on_resource_updated(streams, uri)`` likewise for a resource whose content changed.
        Every ``keepalive_seconds`` the hub has each of its streams send a keep-alive: one
        timer for the process, not one per idle stream."""
        self._layer = layer
        self._keepalive_seconds = keepalive_seconds
        self._on_catalog_change = on_catalog_change
        self._on_resource_updated = on_resource_updated
        self._rounds: set[asyncio.Task[None]] = set()
        self._channel = ""
        self._streams: dict[int, set[HubStream]] = defaultdict(set)
        self._ready: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()

    async def _start(self) -> None:
        # Every process-local channel must use the layer's default prefix: channels-redis
        # serves them all from one receive loop keyed by that prefix, and a channel with
        # another prefix would only be read when its own receiver wins the shared lock.
        self._channel = await self._layer.new_channel()
        await self._layer.group_add(names.CATALOG_ALL_GROUP, self._channel)
        self._tasks = [
            asyncio.ensure_future(self._receive()),
            asyncio.ensure_future(self._renew()),
            asyncio.ensure_future(self._keep_alive()),
        ]

    async def register(self, stream: HubStream) -> None:
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._start())
        await asyncio.shield(self._ready)
        async with self._lock:
            first = not self._streams[stream.tenant_id]
            self._streams[stream.tenant_id].add(stream)
            if first:
                await self._layer.group_add(names.tenant_group(stream.tenant_id), self._channel)

    async def unregister(self, stream: HubStream) -> None:
        async with self._lock:
            streams = self._streams.get(stream.tenant_id)
            if streams is None:
                return
            streams.discard(stream)
            if not streams:
                del self._streams[stream.tenant_id]
                with contextlib.suppress(Exception):
                    await self._layer.group_discard(names.tenant_group(stream.tenant_id), self._channel)

    def held(self) -> int:
        return sum(len(s) for s in self._streams.values())

    def streams(self) -> list[HubStream]:
        return [stream for streams in self._streams.values() for stream in streams]

    async def _receive(self) -> None:
        while True:
            try:
                message = await self._layer.receive(self._channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("stream hub: channel layer receive failed; retrying")
                await asyncio.sleep(1)
                continue
            messages.dispatch(self, message)

    # --- messages (see mcp_platform.mcp.messages) ----------------------------------------

    def _batch(self, message: dict[str, Any]) -> list[HubStream]:
        tenant_id = message.get("tenant_id")
        groups = self._streams.values() if tenant_id is None else [self._streams.get(tenant_id, set())]
        return [stream for streams in list(groups) for stream in streams]

    def _start_round(self, round_: Awaitable[None]) -> None:
        task = asyncio.ensure_future(round_)
        self._rounds.add(task)
        task.add_done_callback(self._rounds.discard)

    def catalog_changed(self, message: dict[str, Any]) -> None:
        batch = self._batch(message)
        if batch:
            self._start_round(self._on_catalog_change(batch))

    def resource_updated(self, message: dict[str, Any]) -> None:
        batch = self._batch(message)
        uri = message.get("uri")
        if batch and isinstance(uri, str) and self._on_resource_updated is not None:
            self._start_round(self._on_resource_updated(batch, uri))

    def session_events(self, message: dict[str, Any]) -> None:
        self._wake_session(message, "events")

    def session_ended(self, message: dict[str, Any]) -> None:
        self._wake_session(message, "ended")

    def task_changed(self, message: dict[str, Any]) -> None:
        task_id = message.get("task_id")
        if not isinstance(task_id, str):
            return
        for stream in list(self._streams.get(message.get("tenant_id", -1), set())):
            if stream.follows_task(task_id):
                stream.wake(TASK_REASON + task_id)

    def _wake_session(self, message: dict[str, Any], reason: str) -> None:
        session_id = message.get("session_id")
        for stream in list(self._streams.get(message.get("tenant_id", -1), set())):
            if stream.session_id == session_id:
                stream.wake(reason)

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._keepalive_seconds)
            for streams in list(self._streams.values()):
                for stream in list(streams):
                    stream.keep_alive()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_SECONDS)
            async with self._lock:
                groups = [names.CATALOG_ALL_GROUP, *(names.tenant_group(t) for t in self._streams)]
            for group in groups:
                with contextlib.suppress(Exception):
                    await self._layer.group_add(group, self._channel)
