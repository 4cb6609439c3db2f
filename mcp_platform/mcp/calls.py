"""The link between a running tool call and the MCP stream that carries it.

A handler never writes to HTTP itself: it notifies and asks through a ``CallLink``. The
engine provides one per ``tools/call``; its messages go on that request's stream.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class ClientRequestError(Exception):
    """The client answered a server→client request with an error, or not in time."""


class CallLink(Protocol):
    progress_token: str | int | None
    client_capabilities: dict[str, Any]
    cancelled: asyncio.Event

    def log_enabled(self, level: str) -> bool: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification related to this call on its stream."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request to the client on this call's stream and wait for its answer.

        Raises ClientRequestError on an error answer or a timeout.
        """

    async def close_stream(self) -> None:
        """Close the HTTP response early; later messages wait in the event store."""
