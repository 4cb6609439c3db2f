"""What both revisions' engines share: the method table and its error funnel, the methods
that read the same on both, running a call under its link, and the task id.

Two revisions are two front doors onto the same rooms. The handshake-era engine
(``engine.py``) knows its client from the session, the 2026-07-28 engine
(``stateless.py``) from each request's envelope; both are a ``Client`` here, and a handler
takes the caller's identity, the request, its client and the stream where request-related
messages go. A revision module holds only what the revision changes: how a result and an
error are shaped, how a handler asks its client, and its own methods.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.calls import CallLink, MissingClientCapability, Relayed, Stream, missing_capability
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.features import CAPABILITIES, completion, prompts, resources
from mcp_platform.mcp.features.paging import Pager
from mcp_platform.mcp.host import Identity, Requester, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError, Message
from mcp_platform.mcp.links import LinkRuntime
from mcp_platform.mcp.shapes import CallToolResult, DetailedTask

log = logging.getLogger(__name__)

T = TypeVar("T")


class Client(Protocol):
    """What a request says about its client: the session's handshake, or the envelope."""

    @property
    def protocol_version(self) -> str: ...

    @property
    def client_capabilities(self) -> dict[str, Any]: ...

    @property
    def client_info(self) -> dict[str, Any]: ...

    @property
    def log_level(self) -> str: ...


ClientT = TypeVar("ClientT", bound=Client)
# How the revision answers an error: a JSON-RPC error message, or the error itself for a
# transport that also needs its HTTP status.
ErrorT = TypeVar("ErrorT")
Handler = Callable[[Identity, Message, ClientT, Stream], Awaitable[Any]]
# A paged list of the features (resources, templates, prompts).
Listing = Callable[[ToolHost[Any], Identity, dict[str, Any], Pager], Awaitable[dict[str, Any]]]
# A feature request that may ask the client (resources/read, prompts/get).
Answering = Callable[[ToolHost[Any], Identity, dict[str, Any], Requester], Awaitable[dict[str, Any]]]
# What a handler that may ask its client runs, given the link to ask through.
Asking = Callable[[CallLink], Awaitable[Mapping[str, Any] | Relayed]]


class RequestSpan(Protocol):
    """A trace span the platform opened for one request (``RequestTracer``)."""

    def failed(self, code: int, message: str) -> None: ...

    def end(self) -> None: ...


class RequestTracer(Protocol):
    """Opens the span of one request (method, params, JSON-RPC id, protocol revision); the
    engine ends it when the request is answered. The platform's OpenTelemetry tracing
    (``mcp_platform.tracing.start_request``) is one; the engine knows no tracing library."""

    def __call__(
        self, method: str, params: Mapping[str, Any], request_id: Any, protocol_version: str
    ) -> RequestSpan: ...


async def run_under(link: LinkRuntime, run: Awaitable[T]) -> T | None:
    """Run a call as the one ``link`` follows (a cancellation interrupts it); its result, or
    None when the client cancelled it here (no answer is due then). What the call raises
    goes through.

    The call runs in the request's own task: a cancellation, after its grace period, cancels
    that task and is taken back here (``LinkRuntime.took_back``), while a cancellation of
    the request itself (the server stopping) goes on. A task of its own per call, and the
    waiter that watched it, cost an allocation each and two turns of the event loop on every
    call, and cancellations are rare.
    """
    task = asyncio.current_task()
    assert task is not None
    link.watch(task)
    try:
        result = await run
    except asyncio.CancelledError:
        if link.took_back(task):
            return None
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # a failure, or a round's end (InputRequired): unless cancelled
        if link.cancelled.is_set() and link.on_cancel is None:
            return None
        raise
    finally:
        link.close()
    if link.cancelled.is_set() and link.on_cancel is None:
        return None
    return result


@dataclass(frozen=True)
class SpineConfig:
    server_name: str
    server_version: str
    page_size: int
    cancel_grace: float
    # Whether an exception means Redis or the database did not answer: such a request is
    # not an internal error but the transport's 503 with Retry-After.
    is_unavailable: Callable[[BaseException], bool]


class Spine(ABC, Generic[ClientT, ErrorT]):
    """An engine: the methods both revisions answer alike, dispatched through one funnel.

    A revision's engine adds its own methods to ``_methods`` and says what it changes
    (the abstract methods); a method added here is served on both revisions.
    """

    # Each engine's own kind of SpineConfig.
    config: SpineConfig
    # Set by the platform when tracing is on; None costs the hot path one attribute read.
    tracer: RequestTracer | None = None

    def __init__(self, *, host: ToolHost[Any], cursors: CursorCodec, config: SpineConfig) -> None:
        self.host = host
        self.cursors = cursors
        self.config = config
        self.pager = Pager(cursors, config.page_size)
        self.server_info = {"name": config.server_name, "version": config.server_version}
        self._is_unavailable = config.is_unavailable
        self._methods: dict[str, Handler[ClientT]] = {
            "tools/list": self._tools_list,
            "resources/list": self._listing(resources.list_resources),
            "resources/templates/list": self._listing(resources.list_templates),
            "resources/read": self._asking_for(resources.read),
            "prompts/list": self._listing(prompts.list_prompts),
            "prompts/get": self._asking_for(prompts.get),
            "completion/complete": self._complete,
        }

    async def handle(
        self, identity: Identity, message: Message, client: ClientT, stream: Stream
    ) -> dict[str, Any] | ErrorT | Relayed | None:
        """The answer to a request, as the revision shapes it (``_result``, ``_error``); None
        when the request was cancelled (no answer then), or Relayed when another process
        wrote the answer to the stream's log."""
        handler = self._methods.get(message.method)
        span = None
        if self.tracer is not None:
            span = self.tracer(message.method, message.params, message.raw.get("id"), client.protocol_version)
        error: JsonRpcError | None = None
        try:
            if handler is None:
                raise self._unknown_method(message.method)
            result = await handler(identity, message, client, stream)
        except MissingClientCapability as exc:
            error = missing_capability(exc.capability)
        except JsonRpcError as exc:
            error = exc
        except Exception as exc:
            if self._is_unavailable(exc):
                raise
            log.exception("internal error handling %s", message.method)
            error = JsonRpcError(jsonrpc.INTERNAL_ERROR, "Internal error")
        else:
            if result is None or isinstance(result, Relayed):
                return result
            return self._result(message, result)
        finally:
            if span is not None:
                if error is not None:
                    span.failed(error.code, error.message)
                span.end()
        assert error is not None  # every path that set none returned
        return self._error(message, error)

    # --- what a revision changes -------------------------------------------------------

    @abstractmethod
    def _unknown_method(self, method: str) -> JsonRpcError: ...

    @abstractmethod
    def _error(self, message: Message, error: JsonRpcError) -> ErrorT: ...

    @abstractmethod
    def _result(self, message: Message, result: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    async def _asking(
        self, identity: Identity, message: Message, client: ClientT, stream: Stream, run: Asking
    ) -> Mapping[str, Any] | Relayed | None:
        """Run a request whose handler may ask the client (``run`` gets the link to ask
        through); its result, or None when there is no answer to give."""

    def _requester(self, client: ClientT, link: CallLink) -> Requester:
        return Requester(client_info=client.client_info, protocol_version=client.protocol_version, link=link)

    def capabilities(self) -> dict[str, Any]:
        """What the server offers on both revisions (each adds its way of doing tasks)."""
        return {"tools": {"listChanged": True}, **CAPABILITIES, "logging": {}}

    # --- methods -----------------------------------------------------------------------

    async def _call_tool(
        self, identity: Identity, name: str, arguments: dict[str, Any], link: CallLink
    ) -> CallToolResult | DetailedTask | Relayed:
        """The tool's result (a worker's Relayed, or the task when the host made the call
        one), or -32602 for a tool the caller may not use."""
        result = await self.host.call_tool(identity, name, arguments, link)
        if result is None:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        return result

    def _task_id(self, message: Message, client: ClientT) -> str:
        task_id = message.params.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise JsonRpcError(INVALID_PARAMS, "params.taskId (a string) is required")
        return task_id

    async def _tools_list(
        self, identity: Identity, message: Message, client: ClientT, stream: Stream
    ) -> dict[str, Any]:
        listed = await self.host.list_tools(identity)
        return self.pager.page(listed, message.params, key="tools", scope=f"tools/list:{identity.subject}")

    def _listing(self, list_page: Listing) -> Handler[ClientT]:
        """The method of a paged list of ``mcp_platform.mcp.features``."""

        async def method(identity: Identity, message: Message, client: ClientT, stream: Stream) -> dict[str, Any]:
            return await list_page(self.host, identity, message.params, self.pager)

        return method

    def _asking_for(self, answer: Answering) -> Handler[ClientT]:
        """The method of a feature request whose handler may ask the client (a read, a
        prompt), as a tool call may."""

        async def method(
            identity: Identity, message: Message, client: ClientT, stream: Stream
        ) -> Mapping[str, Any] | Relayed | None:
            async def run(link: CallLink) -> dict[str, Any]:
                return await answer(self.host, identity, message.params, self._requester(client, link))

            return await self._asking(identity, message, client, stream, run)

        return method

    async def _complete(self, identity: Identity, message: Message, client: ClientT, stream: Stream) -> dict[str, Any]:
        return await completion.complete(self.host, identity, message.params)
