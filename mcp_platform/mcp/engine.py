"""MCP method handling for handshake-era sessions (2025-03-26 … 2025-11-25).

Transport-independent: the HTTP layer hands over parsed messages, the session, the
caller's identity and the stream where request-related messages go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from redis.asyncio import Redis

from mcp_platform.mcp import jsonrpc, loglevels, messages, names
from mcp_platform.mcp.calls import Layer, Relayed, Stream, StreamCallLink, request_key
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.features import CAPABILITIES, legacy, tools
from mcp_platform.mcp.features.paging import Pager
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from mcp_platform.mcp.sessions import Session, SessionStore, new_session_id
from mcp_platform.mcp.versions import negotiate
from mcp_platform.redis_batch import CommandBatch

log = logging.getLogger(__name__)


class EngineLayer(Layer, Protocol):
    async def send(self, channel: str, message: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class EngineConfig:
    server_name: str
    server_version: str
    page_size: int
    client_request_timeout: float
    cancel_grace: float
    # Whether an exception means Redis or the database did not answer: such a request is
    # not an internal error but the transport's 503 with Retry-After.
    is_unavailable: Callable[[BaseException], bool]


class Engine:
    def __init__(
        self,
        *,
        host: ToolHost[Any],
        sessions: SessionStore,
        redis: Redis,
        batch: CommandBatch,
        layer: EngineLayer,
        cursors: CursorCodec,
        config: EngineConfig,
    ) -> None:
        self.host = host
        self.sessions = sessions
        self.redis = redis
        self.batch = batch
        self.layer = layer
        self.cursors = cursors
        self.config = config
        self.pager = Pager(cursors, config.page_size)
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
        self._methods.update(legacy.methods(self))  # resources, prompts, completion

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
                **CAPABILITIES,
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
        except Exception as exc:
            if self.config.is_unavailable(exc):
                raise
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
            await self.layer.send(channel.decode(), messages.mcp_reply(message.raw))

    async def _cancel(self, session: Session, request_id: jsonrpc.RequestId) -> None:
        key = request_key(request_id)
        channel = cast(bytes | None, await self.redis.get(names.inflight_key(session.id, key)))
        if channel is not None:
            await self.layer.send(channel.decode(), messages.mcp_cancel())
        else:
            await self.redis.set(names.cancelled_key(session.id, key), b"1", ex=60)

    # --- methods -----------------------------------------------------------------------

    async def _ping(self, session: Session, identity: Identity, message: Message, stream: Stream) -> dict[str, Any]:
        return {}

    async def _set_level(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        level = message.params.get("level")
        if not loglevels.is_level(level):
            levels = ", ".join(loglevels.LOG_LEVELS)
            raise JsonRpcError(INVALID_PARAMS, f"Invalid log level {level!r}; expected one of {levels}")
        session.log_level = level
        await self.sessions.save(session)
        return {}

    async def _tools_list(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any]:
        listed = await self.host.list_tools(identity)
        return self.pager.page(listed, message.params, key="tools", scope=f"tools/list:{identity.subject}")

    async def _tools_call(
        self, session: Session, identity: Identity, message: Message, stream: Stream
    ) -> dict[str, Any] | Relayed | None:
        params = message.params
        name, arguments = tools.call_params(params)
        support = await self.host.task_support(identity, name)  # None: no such tool for this caller
        task = params.get("task")
        if task is not None and not isinstance(task, dict):
            raise JsonRpcError(INVALID_PARAMS, 'params.task must be an object such as {"ttl": 60000}')
        if task is None and support == "required":
            raise JsonRpcError(METHOD_NOT_FOUND, f"Tool '{name}' must be called as a task (add params.task)")
        if task is not None and support == "forbidden":
            raise JsonRpcError(METHOD_NOT_FOUND, f"Tool '{name}' does not support task-augmented calls")
        link = self.call_link(session, message, stream)
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
        return result

    def call_link(self, session: Session, message: Message, stream: Stream) -> StreamCallLink:
        """The link of a request that runs here and may talk to its client on its stream
        (progress, logs, elicitation, sampling): a tool call, a prompt, a read."""
        meta = message.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        return StreamCallLink(
            stream,
            cancel_grace=self.config.cancel_grace,
            batch=self.batch,
            redis=self.redis,
            layer=self.layer,
            request_id=message.id,
            progress_token=token if jsonrpc.is_valid_id(token) else None,
            client_capabilities=session.client_capabilities,
            client_info=session.client_info,
            log_level=session.log_level,
            request_timeout=self.config.client_request_timeout,
            protocol_version=session.protocol_version,
        )

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
        offset = self.pager.offset(message.params, scope)
        tasks, more = await self.host.list_tasks(identity, offset, self.config.page_size)
        result: dict[str, Any] = {"tasks": tasks}
        if more:
            result["nextCursor"] = self.cursors.encode(offset + len(tasks), scope=scope)
        return result
