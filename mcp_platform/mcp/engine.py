"""MCP method handling for handshake-era sessions (2025-03-26 … 2025-11-25).

Transport-independent: the HTTP layer hands over parsed messages, the session, the
caller's identity and the stream where request-related messages go. What both revisions
share is in ``spine.py``; this module holds the handshake, the session's own methods
(logging level, subscriptions, cancellation, answers to server→client requests), tools/call
with its ``task`` parameter and the 2025-11-25 tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from redis.asyncio import Redis

from mcp_platform.mcp import inbox, jsonrpc, loglevels, messages, names
from mcp_platform.mcp.calls import CallLink, Layer, Relayed, Stream, request_key
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.features import resources, tools
from mcp_platform.mcp.host import Identity, Requester, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from mcp_platform.mcp.links import StreamCallLink
from mcp_platform.mcp.sessions import Session, SessionStore, new_session_id
from mcp_platform.mcp.shapes import CallToolResult, Task
from mcp_platform.mcp.spine import Asking, Spine, SpineConfig, run_under
from mcp_platform.mcp.versions import negotiate
from mcp_platform.redis_batch import CommandBatch


class EngineLayer(Layer, Protocol):
    async def send(self, channel: str, message: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class EngineConfig(SpineConfig):
    # How long a server→client request (elicitation, sampling) waits for the client.
    client_request_timeout: float


class SessionSubscriptions:
    """The calling session's subscribed URIs (``features.resources.Subscriptions``)."""

    def __init__(self, sessions: SessionStore, session: Session) -> None:
        self._sessions = sessions
        self._session = session

    async def add(self, uri: str) -> bool:
        return await self._sessions.subscribe(self._session, uri)

    async def remove(self, uri: str) -> None:
        await self._sessions.unsubscribe(self._session, uri)


class Engine(Spine[Session, dict[str, Any]]):
    """The handshake-era engine: its client is the session."""

    config: EngineConfig

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
        super().__init__(host=host, cursors=cursors, config=config)
        self.sessions = sessions
        self.redis = redis
        self.batch = batch
        self.layer = layer
        self._methods.update(
            {
                "ping": self._ping,
                "logging/setLevel": self._set_level,
                "tools/call": self._tools_call,
                "tasks/get": self._tasks_get,
                "tasks/result": self._tasks_result,
                "tasks/list": self._tasks_list,
                "tasks/cancel": self._tasks_cancel,
                "resources/subscribe": self._resources_subscribe,
                "resources/unsubscribe": self._resources_unsubscribe,
            }
        )

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
                **self.capabilities(),
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": self.server_info,
        }
        return session, jsonrpc.result(message.id, result)

    # --- how this revision shapes answers -------------------------------------------

    def _unknown_method(self, method: str) -> JsonRpcError:
        if method == "initialize":
            return JsonRpcError(jsonrpc.INVALID_REQUEST, "Session is already initialized")
        return JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _error(self, message: Message, error: JsonRpcError) -> dict[str, Any]:
        return jsonrpc.error(message.id, error)

    def _result(self, message: Message, result: dict[str, Any]) -> dict[str, Any]:
        return jsonrpc.result(message.id, result)

    async def _asking(
        self, identity: Identity, message: Message, session: Session, stream: Stream, run: Asking
    ) -> Mapping[str, Any] | Relayed:
        """A read or a prompt asks its client on the request's stream, as a tool call does."""
        link = self.call_link(session, message, stream)
        try:
            return await run(link)
        finally:
            link.close()

    def _requester(self, session: Session, link: CallLink) -> Requester:
        return Requester(
            session_id=session.id, client_info=session.client_info, protocol_version=session.protocol_version, link=link
        )

    # --- inbound messages --------------------------------------------------------------

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
            await inbox.post(self.layer, channel, messages.mcp_reply(message.raw))

    async def _cancel(self, session: Session, request_id: jsonrpc.RequestId) -> None:
        key = request_key(request_id)
        channel = cast(bytes | None, await self.redis.get(names.inflight_key(session.id, key)))
        if channel is not None:
            await inbox.post(self.layer, channel, messages.mcp_cancel())
        else:
            await self.redis.set(names.cancelled_key(session.id, key), b"1", ex=60)

    # --- methods -----------------------------------------------------------------------

    async def _ping(self, identity: Identity, message: Message, session: Session, stream: Stream) -> dict[str, Any]:
        return {}

    async def _set_level(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> dict[str, Any]:
        level = message.params.get("level")
        if not loglevels.is_level(level):
            levels = ", ".join(loglevels.LOG_LEVELS)
            raise JsonRpcError(INVALID_PARAMS, f"Invalid log level {level!r}; expected one of {levels}")
        session.log_level = level
        await self.sessions.save(session)
        return {}

    async def _tools_call(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> Mapping[str, Any] | Relayed | None:
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
        return await run_under(link, self._call_tool(identity, name, arguments, link))

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

    async def _resources_subscribe(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> dict[str, Any]:
        return await resources.subscribe(
            self.host, identity, message.params, SessionSubscriptions(self.sessions, session)
        )

    async def _resources_unsubscribe(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> dict[str, Any]:
        subscriptions = SessionSubscriptions(self.sessions, session)
        return await resources.unsubscribe(self.host, identity, message.params, subscriptions)

    # --- tasks (2025-11-25, experimental) ----------------------------------------------

    async def _tasks_get(self, identity: Identity, message: Message, session: Session, stream: Stream) -> Task:
        task = await self.host.get_task(identity, self._task_id(message, session))
        if task is None:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return task

    async def _tasks_result(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> CallToolResult:
        return await self.host.task_result(identity, self._task_id(message, session))

    async def _tasks_cancel(self, identity: Identity, message: Message, session: Session, stream: Stream) -> Task:
        return await self.host.cancel_task(identity, self._task_id(message, session))

    async def _tasks_list(
        self, identity: Identity, message: Message, session: Session, stream: Stream
    ) -> dict[str, Any]:
        scope = f"tasks/list:{identity.subject}"
        offset = self.pager.offset(message.params, scope)
        tasks, more = await self.host.list_tasks(identity, offset, self.config.page_size)
        result: dict[str, Any] = {"tasks": tasks}
        if more:
            result["nextCursor"] = self.cursors.encode(offset + len(tasks), scope=scope)
        return result
