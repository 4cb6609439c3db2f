"""MCP method handling for stateless requests (protocol revision 2026-07-28).

Every request carries its own envelope (``_meta``: protocol version, client capabilities,
client info, log level, progress token) and nothing is carried over between requests: no
session, no negotiated state. The transport (``transport/stateless_http.py``) has checked
the envelope and the routing headers; this module dispatches the method and shapes the
result: ``resultType`` on every result, the server's identity in ``_meta``, caching hints
on every list. Asking the client for input is multi-round (MRTR): a round that needs input
answers ``input_required`` with a sealed ``requestState`` (``request_state.py``), and the
client's retry runs the handler again with the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_platform.mcp import jsonrpc, loglevels
from mcp_platform.mcp.calls import CallLink, InputRequired, Relayed, Stream, missing_capability
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.features import resources, tools
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError, Message
from mcp_platform.mcp.links import LinkRuntime
from mcp_platform.mcp.request_state import RequestStateCodec
from mcp_platform.mcp.rounds import InputRound
from mcp_platform.mcp.shapes import CallToolResult, DetailedTask
from mcp_platform.mcp.spine import Asking, Spine, SpineConfig, run_under
from mcp_platform.mcp.versions import (
    MODERN,
    MODERN_META_CAPABILITIES_KEY,
    MODERN_META_CLIENT_INFO_KEY,
    MODERN_META_LOG_LEVEL_KEY,
    SERVER_INFO_META_KEY,
    TASKS_EXTENSION,
)

TASK_NOT_FOUND = "Task not found"
# Results that are lists a client may cache (with ttlMs/cacheScope): per caller, so "private".
CACHED_METHODS = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)


@dataclass(frozen=True)
class Envelope:
    """What one request says about its client (its ``_meta``), checked by the transport."""

    protocol_version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    log_level: str
    progress_token: str | int | None

    @classmethod
    def of(cls, meta: dict[str, Any], protocol_version: str) -> Envelope:
        capabilities = meta.get(MODERN_META_CAPABILITIES_KEY)
        client_info = meta.get(MODERN_META_CLIENT_INFO_KEY)
        level = meta.get(MODERN_META_LOG_LEVEL_KEY)
        if level is not None and not loglevels.is_level(level):
            levels = ", ".join(loglevels.LOG_LEVELS)
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid log level {level!r}; expected one of {levels}", http_status=400
            )
        token = meta.get("progressToken")
        return cls(
            protocol_version=protocol_version,
            client_capabilities=capabilities if isinstance(capabilities, dict) else {},
            client_info=client_info if isinstance(client_info, dict) else {},
            log_level=level if isinstance(level, str) else loglevels.OFF,
            progress_token=token if jsonrpc.is_valid_id(token) else None,
        )

    def has_extension(self, name: str) -> bool:
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and name in extensions


@dataclass(frozen=True)
class StatelessConfig(SpineConfig):
    # How long a client may keep a list (ttlMs); change notifications on listen streams
    # invalidate it sooner.
    cache_ttl_ms: int


class StatelessEngine(Spine[Envelope, JsonRpcError]):
    """The 2026-07-28 engine: its client is each request's envelope."""

    config: StatelessConfig

    def __init__(
        self,
        *,
        host: ToolHost[Any],
        cursors: CursorCodec,
        request_states: RequestStateCodec,
        config: StatelessConfig,
    ) -> None:
        super().__init__(host=host, cursors=cursors, config=config)
        self.request_states = request_states
        self._methods.update(
            {
                "server/discover": self._discover,
                "tools/call": self._tools_call,
                "tasks/get": self._tasks_get,
                "tasks/update": self._tasks_update,
                "tasks/cancel": self._tasks_cancel,
            }
        )

    def capabilities(self) -> dict[str, Any]:
        # resources.subscribe: listen streams take resourceSubscriptions (there is no
        # resources/subscribe method in this revision).
        return {**super().capabilities(), "extensions": {TASKS_EXTENSION: {}}}

    # --- how this revision shapes answers -------------------------------------------

    def _unknown_method(self, method: str) -> JsonRpcError:
        return JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}", http_status=404)

    def _error(self, message: Message, error: JsonRpcError) -> JsonRpcError:
        """The error itself: the transport answers it with the HTTP status it carries."""
        if error.code == resources.RESOURCE_NOT_FOUND and message.method == "resources/read":
            # This revision answers an unknown resource as invalid params (SEP-2164).
            return JsonRpcError(INVALID_PARAMS, error.message, data=error.data)
        return error

    def _result(self, message: Message, result: dict[str, Any]) -> dict[str, Any]:
        retry = "inputResponses" in message.params or "requestState" in message.params
        return jsonrpc.result(message.id, self.complete(message.method, result, cacheable=not retry))

    def complete(self, method: str, result: dict[str, Any], *, cacheable: bool = True) -> dict[str, Any]:
        """The result as the revision shapes it: resultType, serverInfo, caching hints (not
        on a multi-round retry, whose answer depends on what the client said)."""
        shaped = dict(result)
        shaped.setdefault("resultType", "complete")
        meta = dict(shaped.get("_meta") or {})
        meta[SERVER_INFO_META_KEY] = self.server_info
        shaped["_meta"] = meta
        if cacheable and method in CACHED_METHODS and shaped["resultType"] == "complete":
            shaped["ttlMs"] = self.config.cache_ttl_ms
            shaped["cacheScope"] = "private"  # every list depends on the tenant and the credential
        return shaped

    async def _asking(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream, run: Asking
    ) -> Mapping[str, Any] | None:
        return await self.multi_round(identity, message, envelope, stream, run)

    # --- methods -----------------------------------------------------------------------

    async def _discover(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream
    ) -> dict[str, Any]:
        return {"supportedVersions": list(MODERN), "capabilities": self.capabilities()}

    async def _tools_call(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream
    ) -> Mapping[str, Any] | None:
        params = message.params
        name, arguments = tools.call_params(params)
        support = await self.host.task_support(identity, name)  # None: no such tool for this caller
        tasks = envelope.has_extension(TASKS_EXTENSION)
        if support == "required" and not tasks:
            raise missing_capability(TASKS_EXTENSION)

        async def call(link: CallLink) -> CallToolResult | DetailedTask | Relayed:
            return await self._call_tool(identity, name, arguments, link)

        # A legacy `task` param means nothing here: the server decides, for clients with tasks.
        return await self.multi_round(
            identity, message, envelope, stream, call, may_become_task=tasks and support in ("optional", "required")
        )

    async def multi_round(
        self,
        identity: Identity,
        message: Message,
        envelope: Envelope,
        stream: Stream,
        run: Asking,
        *,
        may_become_task: bool = False,
    ) -> Mapping[str, Any] | None:
        """Run one round of a request that may ask its client (tools/call, prompts/get,
        resources/read): ``run`` gets the link its handler talks through, with the answers
        of earlier rounds. Its result; ``input_required`` when the handler asked for more;
        None when the client went away (the request is cancelled)."""
        input_round = InputRound(await self._answers(identity, message))
        # The runtime itself: a disconnect is this link's cancel, asking is multi-round.
        link = LinkRuntime(
            stream,
            request_id=message.id,
            progress_token=envelope.progress_token,
            client_capabilities=envelope.client_capabilities,
            client_info=envelope.client_info,
            log_level=envelope.log_level,
            protocol_version=envelope.protocol_version,
            input_round=input_round,
            cancel_grace=self.config.cancel_grace,
            may_become_task=may_become_task,
        )
        try:
            result = await run_under(link, run(link))
        except InputRequired:
            return self._input_required(identity, message, input_round.answers, input_round.pending)
        if result is None:
            return None
        if isinstance(result, Relayed):
            return self._relayed(identity, message, input_round.answers, result)
        return result

    def _relayed(
        self, identity: Identity, message: Message, answers: dict[str, Any], relayed: Relayed
    ) -> dict[str, Any] | None:
        """A worker's answer (it ran the call): its result, or its error as this request's."""
        if relayed.final_event is None or not relayed.final_event.data:
            return None  # cancelled: no answer
        response = jsonrpc.parse(relayed.final_event.data)
        if "error" in response:
            error = response["error"]
            raise JsonRpcError(
                error.get("code", jsonrpc.INTERNAL_ERROR), error.get("message", "Error"), data=error.get("data")
            )
        result: dict[str, Any] = response.get("result") or {}
        if result.get("resultType") == "input_required":
            # The worker ran the round; the state is sealed here, where the request is known.
            return self._input_required(identity, message, answers, result.get("inputRequests") or {})
        return result

    # --- tasks (the io.modelcontextprotocol/tasks extension) --------------------------

    def _task_id(self, message: Message, envelope: Envelope) -> str:
        if not envelope.has_extension(TASKS_EXTENSION):
            raise missing_capability(TASKS_EXTENSION)
        return super()._task_id(message, envelope)

    async def _tasks_get(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream
    ) -> DetailedTask:
        task = await self.host.detailed_task(identity, self._task_id(message, envelope))
        if task is None:
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        return task

    async def _tasks_update(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream
    ) -> dict[str, Any]:
        task_id = self._task_id(message, envelope)
        responses = message.params.get("inputResponses")
        if not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "params.inputResponses must be an object of answers by key")
        if not await self.host.answer_task(identity, task_id, responses):
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        return {}  # an acknowledgement: what the task does next shows on tasks/get

    async def _tasks_cancel(
        self, identity: Identity, message: Message, envelope: Envelope, stream: Stream
    ) -> dict[str, Any]:
        if not await self.host.stop_task(identity, self._task_id(message, envelope)):
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        return {}  # the same acknowledgement for a task that had already ended

    # --- multi-round requests ----------------------------------------------------------

    async def _answers(self, identity: Identity, message: Message) -> dict[str, Any]:
        """The client's answers so far: those sealed in requestState plus this retry's."""
        params = message.params
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "params.inputResponses must be an object of answers by key")
        answers: dict[str, Any] = {}
        if "requestState" in params:
            state = await self.request_states.open(
                params["requestState"], subject=identity.subject, method=message.method, params=params
            )
            answers.update(state.answers)
        answers.update(responses)
        return answers

    def _input_required(
        self, identity: Identity, message: Message, answers: dict[str, Any], pending: dict[str, Any]
    ) -> dict[str, Any]:
        """The round's answer: what the handler still needs, and the answers so far, sealed."""
        known = {key: value for key, value in answers.items() if key not in pending}
        return {
            "resultType": "input_required",
            "inputRequests": pending,
            "requestState": self.request_states.seal(
                subject=identity.subject, method=message.method, params=message.params, answers=known
            ),
        }
