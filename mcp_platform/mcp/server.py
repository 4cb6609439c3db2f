"""MCP method handling for handshake-era sessions (2025-03-26 … 2025-11-25).

Transport-independent: the HTTP layer hands over parsed messages, the session, the
caller's identity and the stream where request-related messages go.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from redis.asyncio import Redis

from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.calls import ClientRequestError, Relayed
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.events import StoredEvent
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from mcp_platform.mcp.sessions import Session, SessionStore, new_session_id
from mcp_platform.mcp.versions import negotiate

log = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class Stream(Protocol):
    """Where messages related to one client request go (its POST stream)."""

    # Read-only: the engine never reassigns them (PostStream derives session_id).
    @property
    def session_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    async def send(self, message: dict[str, Any]) -> None: ...

    async def close_early(self) -> None: ...

    async def open(self) -> str: ...

    async def forward(self, event: StoredEvent) -> None: ...


class ChannelLayer(Protocol):
    async def new_channel(self, prefix: str = ...) -> str: ...

    async def send(self, channel: str, message: dict[str, Any]) -> None: ...

    async def receive(self, channel: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EngineConfig:
    server_name: str
    server_version: str
    page_size: int
    client_request_timeout: float
    cancel_grace: float
    # Calls shorter than this never touch Redis for cancellation bookkeeping; a cancel that
    # arrives earlier is parked and picked up when the call registers.
    inflight_register_delay: float = 0.05


def request_key(request_id: jsonrpc.RequestId) -> str:
    """Request ids 1 and "1" are different requests."""
    return json.dumps(request_id)


class Engine:
    def __init__(
        self,
        *,
        host: ToolHost[Any],
        sessions: SessionStore,
        redis: Redis,
        layer: ChannelLayer,
        cursors: CursorCodec,
        config: EngineConfig,
    ) -> None:
        self.host = host
        self.sessions = sessions
        self.redis = redis
        self.layer = layer
        self.cursors = cursors
        self.config = config
        self._methods: dict[
            str, Callable[[Session, Identity, Message, Stream], Awaitable[dict[str, Any] | Relayed | None]]
        ] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "tasks/get": self._tasks_get,
            "tasks/result": self._tasks_result,
            "tasks/list": self._tasks_list,
            "tasks/cancel": self._tasks_cancel,
        }

    # --- lifecycle ---------------------------------------------------------------------

    async def initialize(self, identity: Identity, message: Message) -> tuple[Session, dict[str, Any]]:
        params = message.params
        capabilities = params.get("capabilities")
        client_info = params.get("clientInfo")
        session = Session(
            id=new_session_id(),
            subject=identity.subject,
            tenant_id=identity.tenant_id,
            protocol_version=negotiate(params.get("protocolVersion")),
            client_info=client_info if isinstance(client_info, dict) else {},
            client_capabilities=capabilities if isinstance(capabilities, dict) else {},
            credential=identity.label,
        )
        await self.sessions.create(session)
        result = {
            "protocolVersion": session.protocol_version,
            "capabilities": {
                "tools": {"listChanged": True},
                "logging": {},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": {"name": self.config.server_name, "version": self.config.server_version},
        }
        return session, jsonrpc.result(message.id, result)

    # --- inbound messages --------------------------------------------------------------

    async def handle_request(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any] | Relayed | None:
        """The response message; None when the request was cancelled (no response then), or
        Relayed when another process wrote the response to the stream's log."""
        handler = self._methods.get(message.method)
        try:
            if handler is None:
                if message.method == "initialize":
                    raise JsonRpcError(jsonrpc.INVALID_REQUEST, "Session is already initialized")
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}")
            result = await handler(session, identity, message, stream)
        except JsonRpcError as exc:
            return jsonrpc.error(message.id, exc)
        except Exception:
            log.exception("internal error handling %s", message.method)
            return jsonrpc.error(message.id, JsonRpcError(jsonrpc.INTERNAL_ERROR, "Internal error"))
        if result is None or isinstance(result, Relayed):
            return result
        return jsonrpc.result(message.id, result)

    async def handle_notification(self, session: Session, message: Message) -> None:
        if message.method == "notifications/initialized" and not session.initialized:
            session.initialized = True
            await self.sessions.save(session)
        elif message.method == "notifications/cancelled":
            request_id = message.params.get("requestId")
            if jsonrpc.is_valid_id(request_id):
                await self._cancel(session, request_id)
        # Other notifications (roots/list_changed, progress for our requests) need no action.

    async def handle_response(self, session: Session, message: Message) -> None:
        """Route the client's answer to whichever process is waiting for it."""
        if not isinstance(message.id, str):
            return
        channel = cast(bytes | None, await self.redis.getdel(names.pending_request_key(session.id, message.id)))
        if channel is not None:
            await self.layer.send(channel.decode(), {"type": "mcp.reply", "message": message.raw})

    async def _cancel(self, session: Session, request_id: jsonrpc.RequestId) -> None:
        key = request_key(request_id)
        channel = cast(bytes | None, await self.redis.get(names.inflight_key(session.id, key)))
        if channel is not None:
            await self.layer.send(channel.decode(), {"type": "mcp.cancel"})
        else:
            await self.redis.set(names.cancelled_key(session.id, key), b"1", ex=60)

    # --- methods -----------------------------------------------------------------------

    async def _ping(self, session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        return {}

    async def _set_level(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        level = message.params.get("level")
        if level not in LOG_LEVELS:
            raise JsonRpcError(INVALID_PARAMS, f"Invalid log level {level!r}; expected one of {', '.join(LOG_LEVELS)}")
        session.log_level = level
        await self.sessions.save(session)
        return {}

    def _offset(self, message: Message, scope: str) -> int:
        """Where a paginated list continues: 0 without a cursor; -32602 for one we did not issue."""
        cursor = message.params.get("cursor")
        if cursor is None:
            return 0
        try:
            return self.cursors.decode(cursor, scope=scope)
        except (ValueError, TypeError):
            raise JsonRpcError(INVALID_PARAMS, "Invalid cursor") from None

    async def _tools_list(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        scope = f"tools/list:{identity.subject}"
        offset = self._offset(message, scope)
        tools = await self.host.list_tools(identity)
        end = offset + self.config.page_size
        result: dict[str, Any] = {"tools": tools[offset:end]}
        if end < len(tools):
            result["nextCursor"] = self.cursors.encode(end, scope=scope)
        return result

    async def _tools_call(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any] | Relayed | None:
        params = message.params
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, "params.arguments must be an object")
        support = await self.host.task_support(identity, name)  # None: no such tool for this caller
        task = params.get("task")
        if task is not None and not isinstance(task, dict):
            raise JsonRpcError(INVALID_PARAMS, 'params.task must be an object such as {"ttl": 60000}')
        if task is None and support == "required":
            raise JsonRpcError(METHOD_NOT_FOUND, f"Tool '{name}' must be called as a task (add params.task)")
        if task is not None and support == "forbidden":
            raise JsonRpcError(METHOD_NOT_FOUND, f"Tool '{name}' does not support task-augmented calls")
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        link = StreamCallLink(self, session, stream, message.id, token if jsonrpc.is_valid_id(token) else None)
        if task is not None:
            ttl = task.get("ttl")
            if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0):
                raise JsonRpcError(INVALID_PARAMS, "params.task.ttl must be a non-negative integer (milliseconds)")
            return await self.host.create_task(identity, name, arguments, link, ttl)
        call = asyncio.ensure_future(self.host.call_tool(identity, name, arguments, link))
        link.watch(call)
        try:
            await asyncio.wait({call})
        finally:
            link.close()
        if link.cancelled.is_set() and link.on_cancel is None:
            return None
        result = call.result()
        if result is None:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        return result  # type: ignore[no-any-return]

    # --- tasks (2025-11-25, experimental) ----------------------------------------------

    @staticmethod
    def _task_id(message: Message) -> str:
        task_id = message.params.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise JsonRpcError(INVALID_PARAMS, "params.taskId (a string) is required")
        return task_id

    async def _tasks_get(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        task = await self.host.get_task(identity, self._task_id(message))
        if task is None:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return task

    async def _tasks_result(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        return await self.host.task_result(identity, self._task_id(message))

    async def _tasks_cancel(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        return await self.host.cancel_task(identity, self._task_id(message))

    async def _tasks_list(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        scope = f"tasks/list:{identity.subject}"
        offset = self._offset(message, scope)
        tasks, more = await self.host.list_tasks(identity, offset, self.config.page_size)
        result: dict[str, Any] = {"tasks": tasks}
        if more:
            result["nextCursor"] = self.cursors.encode(offset + len(tasks), scope=scope)
        return result


class StreamCallLink:
    """The CallLink of a call running in this process, answering on its POST stream.

    Cancellation and answers to server→client requests can arrive at any server process;
    they reach this call through its channel-layer channel, registered in Redis.
    """

    def __init__(
        self,
        engine: Engine,
        session: Session,
        stream: Stream,
        request_id: jsonrpc.RequestId,
        progress_token: str | int | None,
    ) -> None:
        self._engine = engine
        self._session = session
        self._stream = stream
        self._request_key = request_key(request_id)
        self.progress_token = progress_token
        self.client_capabilities = session.client_capabilities
        self.client_info = session.client_info
        self.session_id = session.id
        self.stream_id = stream.stream_id
        self.request_id = request_id
        self.log_level = session.log_level
        self.on_cancel: Callable[[], Awaitable[Any]] | None = None
        self.cancelled = asyncio.Event()
        self._call: asyncio.Future[Any] | None = None
        self._channel: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._registered: asyncio.Task[None] | None = None

    # --- CallLink --------------------------------------------------------------------

    def log_enabled(self, level: str) -> bool:
        threshold = self._session.log_level if self._session.log_level in LOG_LEVELS else "info"
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._stream.send(jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self._register()
        assert self._channel is not None
        request_id = f"s-{secrets.token_urlsafe(12)}"
        timeout = self._engine.config.client_request_timeout
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        pending_key = names.pending_request_key(self._session.id, request_id)
        await self._engine.redis.set(pending_key, self._channel, ex=int(timeout) + 30)
        try:
            await self._stream.send(jsonrpc.request(request_id, method, params))
            try:
                reply = await asyncio.wait_for(answer, timeout)
            except TimeoutError:
                await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "timed out"})
                raise ClientRequestError(f"no answer within {timeout:g} seconds") from None
        finally:
            self._waiting.pop(request_id, None)
            await self._engine.redis.delete(pending_key)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise ClientRequestError(str(error.get("message", "error")))
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def close_stream(self) -> None:
        await self._stream.close_early()

    async def open_stream(self) -> str:
        return await self._stream.open()

    async def forward(self, event: StoredEvent) -> None:
        await self._stream.forward(event)

    # --- cancellation and answer routing ---------------------------------------------

    def watch(self, call: asyncio.Future[Any]) -> None:
        self._call = call
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._engine.config.inflight_register_delay, self._start_registration)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_registration(self) -> asyncio.Future[None]:
        if self._registered is None:
            self._registered = self._spawn(self._do_register())
        return self._registered

    async def _register(self) -> None:
        await asyncio.shield(self._start_registration())

    async def _do_register(self) -> None:
        engine = self._engine
        self._channel = await engine.layer.new_channel()
        self._spawn(self._listen(self._channel))
        pipe = engine.redis.pipeline(transaction=False)
        pipe.set(names.inflight_key(self._session.id, self._request_key), self._channel, ex=24 * 3600)
        pipe.getdel(names.cancelled_key(self._session.id, self._request_key))
        _, parked_cancel = await pipe.execute()
        if parked_cancel is not None:
            self._cancel()

    async def _listen(self, channel: str) -> None:
        while True:
            message = await self._engine.layer.receive(channel)
            if message.get("type") == "mcp.cancel":
                self._cancel()
            elif message.get("type") == "mcp.reply":
                reply = message.get("message") or {}
                # Only string ids are relayed here (handle_response drops the rest).
                waiter = self._waiting.get(cast(str, reply.get("id")))
                if waiter is not None and not waiter.done():
                    waiter.set_result(reply)

    def _cancel(self) -> None:
        if self.cancelled.is_set() or self._call is None or self._call.done():
            return
        self.cancelled.set()
        if self.on_cancel is not None:
            # Runs elsewhere (a worker): record the cancellation and let the worker stop it;
            # the relay here ends when the run's log ends.
            detach(self.on_cancel())
            return
        # Cooperative first: the handler sees ctx.cancelled; after the grace period it is interrupted.
        asyncio.get_running_loop().call_later(self._engine.config.cancel_grace, self._call.cancel)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._channel is not None:
            key = names.inflight_key(self._session.id, self._request_key)
            detach(self._engine.redis.delete(key))


# Work that must finish even though the request that started it is done (the event loop
# only keeps weak references to tasks).
_detached_tasks: set[asyncio.Task[Any]] = set()


def detach(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    _detached_tasks.add(task)
    task.add_done_callback(_detached_tasks.discard)
