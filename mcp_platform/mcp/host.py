"""What the MCP engine needs from the platform: identities and tools.

The engine knows nothing about tenants, models or backends; ``tools_app`` implements this.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp_platform.mcp.calls import CallLink


class AuthError(Exception):
    """No usable identity: ``status`` is 404 (no such endpoint) or 401 (bad credential)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Identity(Protocol):
    @property
    def subject(self) -> str: ...

    @property
    def tenant_id(self) -> int: ...


class ToolHost(Protocol):
    async def authenticate(self, endpoint: str, authorization: str | None) -> Identity:
        """The caller of ``/mcp/<endpoint>``; raises AuthError."""

    async def list_tools(self, identity: Identity) -> list[dict[str, Any]]:
        """The caller's visible tools as MCP Tool objects, in a stable order."""

    async def call_tool(
        self, identity: Identity, name: str, arguments: dict[str, Any], link: CallLink
    ) -> dict[str, Any] | None:
        """A CallToolResult, or None when the caller has no such tool (missing or forbidden)."""
