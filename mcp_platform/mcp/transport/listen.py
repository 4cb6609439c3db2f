"""``subscriptions/listen`` streams (2026-07-28): change notifications a client asked for.

The stateless revision has no session and no standalone GET stream; a client that wants
to hear of changes holds a listen request open. Its first message acknowledges the
notifications the server will send (the subset it honours of those asked for); every
notification carries the listen request's id as ``_meta`` subscriptionId. The process's
stream hub wakes it on a catalog change exactly as it wakes legacy GET streams (the same
change bus), and it tells its client only when what its caller sees really changed. There
is nothing to resume: the fingerprint it compares with lives in this stream.

Resource subscriptions (``resourceSubscriptions``, this revision's resources/subscribe)
bring ``notifications/resources/updated`` for those URIs while the caller may read them.
With the tasks extension a client may also follow tasks (``taskIds``): when one of them
changes state on any process, the stream reads it as its caller may see it and sends the
whole DetailedTask (``notifications/tasks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.features import LIST_CHANGED, RESOURCE_UPDATED
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.transport import sse
from mcp_platform.mcp.transport.hub import TASK_REASON
from mcp_platform.mcp.transport.responder import Responder, watch_disconnect
from mcp_platform.mcp.versions import SUBSCRIPTION_ID_META_KEY

# The list_changed filters this server honours, by the name the request uses, and the
# list of ToolHost.visible_digests each one follows.
LIST_FILTERS = {"toolsListChanged": "tools", "promptsListChanged": "prompts", "resourcesListChanged": "resources"}
MAX_TASK_IDS = 100
MAX_RESOURCE_SUBSCRIPTIONS = 1000


class ListenStream(sse.HeldStream):
    def __init__(
        self,
        *,
        host: ToolHost[Any],
        identity: Identity,
        subscription_id: jsonrpc.RequestId,
        wanted: dict[str, Any],
        responder: Responder,
        server_meta: dict[str, Any],
        follows_tasks: bool,
    ) -> None:
        """``follows_tasks``: the request declared the tasks extension, so its ``taskIds``
        are honoured (up to MAX_TASK_IDS of them)."""
        self._host = host
        self.identity = identity
        self.tenant_id = identity.tenant_id
        # The hub finds streams by session id; a listen stream has none, so it names itself.
        self.session_id = f"listen-{secrets.token_hex(8)}"
        self.subscription_id = subscription_id
        self.honoured: dict[str, Any] = {name: True for name in LIST_FILTERS if wanted.get(name) is True}
        self._lists = {LIST_FILTERS[name] for name in self.honoured}
        uris = wanted.get("resourceSubscriptions")
        if isinstance(uris, list):
            kept = [uri for uri in uris if isinstance(uri, str) and uri][:MAX_RESOURCE_SUBSCRIPTIONS]
            self.honoured["resourceSubscriptions"] = kept
        self.resource_uris = frozenset(self.honoured.get("resourceSubscriptions", ()))
        task_ids = wanted.get("taskIds")
        if follows_tasks and isinstance(task_ids, list):
            self.honoured["taskIds"] = [task for task in task_ids if isinstance(task, str)][:MAX_TASK_IDS]
        self._task_ids = frozenset(self.honoured.get("taskIds", ()))
        super().__init__(responder)
        self._server_meta = server_meta
        self._wakeup = asyncio.Event()
        self._reasons: set[str] = set()
        self.digests: Mapping[str, str] = {}
        self._baseline = asyncio.Event()  # set once ``digests`` holds what the client was acknowledged with

    def follows_task(self, task_id: str) -> bool:
        return task_id in self._task_ids

    def wake(self, reason: str) -> None:
        self._reasons.add(reason)
        self._wakeup.set()

    async def run(self, register: Callable[[ListenStream], Awaitable[Callable[[], Awaitable[None]]]]) -> None:
        """Serve the stream until the client leaves; ``register`` joins the process's hub and
        gives back the function that leaves it."""
        await self._responder.start(200, list(sse.HEADERS))
        # Joined and fingerprinted before the acknowledgement: a change the client makes once
        # it holds the acknowledgement always reaches it. A change racing the fingerprint is
        # compared once the baseline is there (``refresh``), and nothing precedes the ack.
        async with self._send_lock:
            unregister = await register(self)
            self.digests = await self._host.visible_digests(self.identity)
            await self._write("notifications/subscriptions/acknowledged", {"notifications": dict(self.honoured)})
            self._baseline.set()
        tasks = [asyncio.ensure_future(c) for c in (self._serve(), watch_disconnect(self._responder))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await unregister()
            self._stop_beat()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._responder.end()

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        async with self._send_lock:
            await self._write(method, params)

    async def _write(self, method: str, params: Mapping[str, Any]) -> None:
        meta = {**(params.get("_meta") or {}), SUBSCRIPTION_ID_META_KEY: self.subscription_id}
        await self._responder.write(sse.event(jsonrpc.dumps(jsonrpc.notification(method, {**params, "_meta": meta}))))

    async def refresh(self) -> None:
        """A catalog change: tell the client of each list it follows that its caller now sees
        differently."""
        await self._baseline.wait()
        host = self._host
        identity = await host.revalidate(self.identity)
        if identity is None:
            self.wake("revoked")
            return
        self.identity = identity
        if not self._lists:
            return
        fresh = await host.visible_digests(identity)
        moved = sorted(name for name in self._lists if fresh.get(name) != self.digests.get(name))
        self.digests = fresh
        for name in moved:
            await self.notify(LIST_CHANGED[name], {})

    async def resource_updated(self, uri: str) -> None:
        """A resource's content changed: tell the client if it follows it and may still read it."""
        if uri in self.resource_uris and await self._host.resource_exists(self.identity, uri):
            await self.notify(RESOURCE_UPDATED, {"uri": uri})

    async def _serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            reasons, self._reasons = self._reasons, set()
            if "revoked" in reasons or "ended" in reasons:
                # The credential is gone, or the server is stopping: end the listen request.
                final = {
                    "resultType": "complete",
                    "_meta": {**self._server_meta, SUBSCRIPTION_ID_META_KEY: self.subscription_id},
                }
                async with self._send_lock:
                    await self._responder.write(sse.event(jsonrpc.dumps(jsonrpc.result(self.subscription_id, final))))
                return
            for reason in sorted(reasons):
                if reason.startswith(TASK_REASON):
                    await self._send_task(reason.removeprefix(TASK_REASON))

    async def _send_task(self, task_id: str) -> None:
        """The task as its caller may see it now (nothing for a task that is not theirs)."""
        task = await self._host.detailed_task(self.identity, task_id)
        if task is not None:
            await self.notify("notifications/tasks", task)
