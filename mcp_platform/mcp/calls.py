"""What a running call sees of its client: the ``CallLink`` interface, the stream its
messages go to, and the exceptions that end a call or one round of it.

The links themselves (where a call runs, how a cancellation or an answer reaches it) are in
``links.py``; multi-round input (2026-07-28) is in ``rounds.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.events import StoredEvent
from mcp_platform.mcp.jsonrpc import MISSING_CLIENT_CAPABILITY, JsonRpcError


class ClientRequestError(Exception):
    """The client answered a server→client request with an error, or not in time."""


class InputRequired(BaseException):
    """A handler on the 2026-07-28 leg asked for client input it has no answer for yet.

    A BaseException, like cancellation, so that a handler's ``except Exception`` does not
    swallow it: it ends this round of the call, which answers ``input_required`` with the
    requests of ``InputRound.pending`` (see ``mcp_platform.mcp.rounds``).
    """


class MissingClientCapability(BaseException):
    """A 2026-07-28 request needs a client capability it did not declare (error -32021).

    A BaseException so that the handler's own ``except Exception`` leaves it to the engine.
    """

    def __init__(self, capability: str) -> None:
        super().__init__(capability)
        self.capability = capability


def missing_capability(capability: str) -> JsonRpcError:
    """-32021 naming what the request must declare (a ClientCapabilities object)."""
    required: dict[str, Any] = {"extensions": {capability: {}}} if capability.startswith("io.") else {capability: {}}
    return JsonRpcError(
        MISSING_CLIENT_CAPABILITY,
        f"This request needs the client capability {capability!r}: declare it in _meta clientCapabilities",
        data={"requiredCapabilities": required},
        http_status=400,
    )


class ContinueAsTask(BaseException):
    """A handler on the 2026-07-28 leg gathered what it needed and continues as a task.

    Raised by ``ctx.continue_as_task()`` on a call that may become one (the request declared
    the tasks extension and the tool supports tasks): the platform creates the task with the
    answers gathered so far and the handler runs again from the start on a worker, where
    the same call returns at once. A BaseException so that ``except Exception`` leaves it.
    """


@dataclass(frozen=True)
class Relayed:
    """A call whose response someone else (a worker) already wrote to its stream's log.

    ``final_event`` None: this process stopped relaying before the end (its client left, or
    it is shutting down); the end will be in the log for the client that resumes."""

    final_event: StoredEvent | None


class CallLink(Protocol):
    progress_token: str | int | None
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    cancelled: asyncio.Event
    # Where the call's messages go, for handing the call to another process.
    session_id: str
    stream_id: str
    request_id: jsonrpc.RequestId
    log_level: str
    protocol_version: str
    # Called instead of interrupting the local task when the client cancels (background calls).
    on_cancel: Callable[[], Awaitable[Any]] | None
    # The 2026-07-28 leg: asking the client is multi-round, a missing capability is an error.
    stateless: bool
    # The request declared the tasks extension and the tool supports tasks (ContinueAsTask).
    may_become_task: bool

    def log_enabled(self, level: str) -> bool: ...

    def input_responses(self) -> dict[str, Any]:
        """The client's answers this (multi-round) call has so far; {} on the legacy leg."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification related to this call on its stream."""

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """Ask the client (elicitation, sampling, roots) and return its answer.

        On the legacy leg a server→client request on this call's stream; raises
        ClientRequestError on an error answer or a timeout. On the 2026-07-28 leg the answer
        of the client's retry (``key`` names it), or InputRequired to ask for it.
        """

    async def close_stream(self) -> None:
        """Close the HTTP response early; later messages wait in the event store."""

    async def open_stream(self, run_id: str | None = None) -> str:
        """Switch the response to SSE now; returns the log position later events follow.
        ``run_id``: the run (on a worker) that produces the rest of this call's stream."""

    async def relay(self, after: str) -> Relayed:
        """Send the client what another process appends to this call's log after ``after``,
        until the final event (the response), which is returned."""


class Layer(Protocol):
    async def new_channel(self, prefix: str = ...) -> str: ...

    async def receive(self, channel: str) -> dict[str, Any]: ...


class Stream(Protocol):
    """Where messages related to one client request go (its POST stream)."""

    # Read-only: a link never reassigns them.
    @property
    def session_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    @property
    def cancel_on_disconnect(self) -> bool:
        """Whether a client that closes the stream cancels its request (2026-07-28: it
        cannot resume it), through the callbacks given to ``on_disconnect``."""

    def on_disconnect(self, callback: Callable[[], None]) -> None: ...

    async def send(self, message: dict[str, Any]) -> None: ...

    async def close_early(self) -> None: ...

    async def open(self, run_id: str | None = None) -> str: ...

    async def relay(self, after: str) -> Relayed: ...


def request_key(request_id: jsonrpc.RequestId) -> str:
    """Request ids 1 and "1" are different requests (1 and '"1"'); an integer, the usual
    id, skips the JSON encoder (a measurable share of a call's CPU)."""
    return str(request_id) if type(request_id) is int else json.dumps(request_id)
