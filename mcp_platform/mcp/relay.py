"""How a call that runs in another process (a Celery worker) reaches its client.

The worker holds no HTTP response. Everything it has for the client goes into the call's
event log in Redis, which the process holding the POST relays and any process replays for
a client that resumes (``Last-Event-ID``). A legacy MCP task's messages go on the session's
standalone stream instead, tagged with the related-task ``_meta``, and the process holding
that stream is woken. This module is the only way code outside the engine writes to a
client's streams: it never builds the engine's keys, frames or group names itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, cast

from redis.asyncio import Redis

from mcp_platform.mcp import inbox, jsonrpc, messages, names
from mcp_platform.mcp.events import EventStore
from mcp_platform.mcp.liveness import Producer, producer_command

RELATED_TASK = "io.modelcontextprotocol/related-task"
# How long the "task done" signal waits for a tasks/result that has not started yet.
TASK_DONE_TTL_SECONDS = 3600


class GroupLayer(Protocol):
    async def send(self, channel: str, message: dict[str, Any]) -> None: ...

    async def group_send(self, group: str, message: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class CallAddress:
    """Where a call's messages go: its session, its POST stream and the request's id; for a
    legacy MCP task, ``task_id`` (its messages then go on the standalone stream). A
    2026-07-28 task has no session (``session_id`` ""): its client polls ``tasks/get``, and
    its progress and log messages have no stream to go to."""

    tenant_id: int
    session_id: str
    stream_id: str
    request_id: jsonrpc.RequestId
    task_id: str | None = None


class Relay:
    def __init__(self, redis: Redis, layer: GroupLayer, events: EventStore) -> None:
        self._redis = redis
        self._layer = layer
        self._events = events

    async def send(self, address: CallAddress, message: dict[str, Any]) -> None:
        """A notification or server→client request related to the call."""
        if not address.session_id:
            return
        if address.task_id is not None:
            params = message.setdefault("params", {})
            params.setdefault("_meta", {})[RELATED_TASK] = {"taskId": address.task_id}
            await self._standalone(address, message)
        else:
            await self._events.append(address.session_id, address.stream_id, jsonrpc.dumps(message))

    async def respond(
        self, address: CallAddress, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None
    ) -> None:
        """The call's final event: its result, its error, or (neither) no response at all,
        as for a cancelled request; the POST that relays the log ends with it."""
        await self._events.run(self.respond_commands(address, result=result, error=error))

    def respond_commands(
        self, address: CallAddress, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None
    ) -> list[tuple[object, ...]]:
        """The commands of ``respond``, for a caller that sends them itself (a worker runs
        them in the script that records the run's outcome)."""
        if error is not None:
            data = jsonrpc.dumps({"jsonrpc": "2.0", "id": address.request_id, "error": error})
        elif result is not None:
            data = jsonrpc.dumps(jsonrpc.result(address.request_id, result))
        else:
            data = b""
        return self._events.append_commands(address.session_id, address.stream_id, data, final=True)

    async def task_status(self, address: CallAddress, task: dict[str, Any]) -> None:
        """``notifications/tasks/status`` on the session's standalone stream; for a 2026-07-28
        task (no session), a ``task.changed`` to the tenant's hubs: the listen streams that
        follow it read the task as it is now and send it."""
        if not address.session_id:
            if address.task_id is not None:
                wake = messages.task_changed(address.tenant_id, address.task_id)
                await self._layer.group_send(names.tenant_group(address.tenant_id), wake)
            return
        await self._standalone(address, jsonrpc.notification("notifications/tasks/status", task))

    async def task_done(self, task_id: str, status: str) -> None:
        """Wake whoever waits in ``tasks/result`` for this task, on any process."""
        key = names.run_done_key(task_id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.xadd(key, {"status": status})
        pipe.expire(key, TASK_DONE_TTL_SECONDS)
        await pipe.execute()

    async def wait_task_done(self, task_id: str, timeout_seconds: float) -> None:
        """Return once ``task_done`` was signalled, or after the timeout (then check again)."""
        await self._redis.xread({names.run_done_key(task_id): "0-0"}, count=1, block=int(timeout_seconds * 1000))

    async def run_producer(self, address: CallAddress, run_id: str, *, worker: str = "", deadline: float = 0.0) -> None:
        """Who produces the call's stream: the worker process that runs it now, until
        ``deadline`` (epoch seconds) at the latest; no worker: queued again. Followers of
        the stream recover the run when that worker stops beating (liveness.py)."""
        commands = self.producer_commands(address, run_id, worker=worker, deadline=deadline)
        if commands:  # none for a task, which has no stream: the periodic sweep watches its worker
            await self._events.run(commands)

    def producer_commands(
        self, address: CallAddress, run_id: str, *, worker: str = "", deadline: float = 0.0
    ) -> list[tuple[object, ...]]:
        """The commands of ``run_producer``, for a caller that sends them itself."""
        if not address.session_id or address.task_id is not None:
            return []
        producer = Producer(process=worker, run_id=run_id, deadline=deadline)
        return [producer_command(address.session_id, address.stream_id, producer, self._events.ttl_seconds)]

    async def register_runner(self, run_id: str, channel: str) -> None:
        """The inbox address of the call running a run now; cancellations go there."""
        await self._redis.set(names.run_channel_key(run_id), channel, ex=24 * 3600)

    async def unregister_runner(self, run_id: str) -> None:
        await self._redis.delete(names.run_channel_key(run_id))

    async def cancel_runner(self, run_id: str) -> None:
        """Tell the process running ``run_id`` (if one registered) to stop it."""
        channel = cast(bytes | None, await self._redis.get(names.run_channel_key(run_id)))
        if channel is not None:
            await inbox.post(self._layer, channel, messages.mcp_cancel())

    async def session_notify(self, tenant_id: int, session_id: str, method: str, params: dict[str, Any]) -> None:
        """A notification for a session as a whole, not for one of its calls (e.g.
        ``notifications/elicitation/complete``): on its standalone stream, from any process."""
        address = CallAddress(tenant_id, session_id, names.STANDALONE_STREAM, 0)
        await self._standalone(address, jsonrpc.notification(method, params))

    async def _standalone(self, address: CallAddress, message: dict[str, Any]) -> None:
        await self._events.append(address.session_id, names.STANDALONE_STREAM, jsonrpc.dumps(message))
        wake = messages.session_events(address.tenant_id, address.session_id)
        await self._layer.group_send(names.tenant_group(address.tenant_id), wake)
