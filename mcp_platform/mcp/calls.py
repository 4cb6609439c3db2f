"""The link between a running tool call and the MCP stream that carries it.

A handler never writes to HTTP itself: it notifies and asks through a ``CallLink``. The
engine provides one per ``tools/call``; its messages go on that request's stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_platform.mcp.events import StoredEvent


class ClientRequestError(Exception):
    """The client answered a server→client request with an error, or not in time."""


@dataclass(frozen=True)
class Relayed:
    """A call whose response someone else (a worker) already wrote to its stream's log."""

    final_event: StoredEvent


class CallLink(Protocol):
    progress_token: str | int | None
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    cancelled: asyncio.Event
    # Where the call's messages go, for handing the call to another process.
    session_id: str
    stream_id: str
    request_id: str | int
    log_level: str
    # Called instead of interrupting the local task when the client cancels (background calls).
    on_cancel: Callable[[], Awaitable[Any]] | None

    def log_enabled(self, level: str) -> bool: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification related to this call on its stream."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request to the client on this call's stream and wait for its answer.

        Raises ClientRequestError on an error answer or a timeout.
        """

    async def close_stream(self) -> None:
        """Close the HTTP response early; later messages wait in the event store."""

    async def open_stream(self) -> str:
        """Switch the response to SSE now; returns the log position later events follow."""

    async def forward(self, event: StoredEvent) -> None:
        """Write an event another process already stored in this call's log."""
