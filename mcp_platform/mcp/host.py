"""What the MCP engine needs from the platform: identities and tools.

The engine knows nothing about tenants, models or backends; ``tools_app`` implements this.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from mcp_platform.mcp.calls import CallLink


class AuthError(Exception):
    """No usable identity or not enough of it: ``status`` is 404 (no such endpoint), 401 (no
    or a bad credential) or 403 (a token without the scope the request needs).

    The OAuth fields become the ``WWW-Authenticate: Bearer`` challenge (MCP authorization,
    RFC 6750 §3, RFC 9728 §5.1): ``resource_metadata`` is the URL of the endpoint's Protected
    Resource Metadata (empty when the endpoint offers no OAuth), ``scope`` what the request
    needs, ``error`` ``invalid_token`` or ``insufficient_scope``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        resource_metadata: str = "",
        scope: str = "",
        error: str = "",
        error_description: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.resource_metadata = resource_metadata
        self.scope = scope
        self.error = error
        self.error_description = error_description


class Identity(Protocol):
    @property
    def subject(self) -> str: ...

    @property
    def tenant_id(self) -> int: ...

    @property
    def label(self) -> str:
        """How operators see the credential (never the secret itself)."""


# The engine hands each host method the identity that host's authenticate() returned, so a
# host may take its own identity type (the platform's Principal).
IdentityT = TypeVar("IdentityT", bound=Identity)


class ToolHost(Protocol[IdentityT]):
    async def authenticate(self, endpoint: str, authorization: str | None, origin: str) -> IdentityT:
        """The caller of ``/mcp/<endpoint>``; raises AuthError. ``origin`` is the scheme and
        authority the request was sent to (``http://127.0.0.1:8000``): an OAuth token must
        be meant for the endpoint's URL there."""

    def authorize(self, identity: IdentityT, method: str) -> None:
        """Raise AuthError (403) when the identity may not send ``method`` at all (an OAuth
        token without the scope it needs). No I/O: called for every request message."""

    async def list_tools(self, identity: IdentityT) -> list[dict[str, Any]]:
        """The caller's visible tools as MCP Tool objects, in a stable order."""

    async def revalidate(self, identity: IdentityT) -> IdentityT | None:
        """The identity as it stands now (scopes may have changed); None once it is no longer
        valid (key revoked or expired, tenant deactivated)."""

    async def visible_digest(self, identity: IdentityT) -> str:
        """A fingerprint of the caller's visible tool list; it changes exactly when the list does."""

    async def task_support(self, identity: IdentityT, name: str) -> str | None:
        """forbidden/optional/required for a tool the caller may use; None when it may not."""

    async def create_task(
        self, identity: IdentityT, name: str, arguments: dict[str, Any], link: CallLink, ttl_ms: int | None
    ) -> dict[str, Any]:
        """Start a task-augmented call; returns a CreateTaskResult."""

    async def get_task(self, identity: IdentityT, task_id: str) -> dict[str, Any] | None:
        """The caller's task, or None (missing and foreign look the same)."""

    async def task_result(self, identity: IdentityT, task_id: str) -> dict[str, Any]:
        """Wait for the task to end; its result, or raise JsonRpcError."""

    async def list_tasks(self, identity: IdentityT, offset: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """A page of the caller's tasks, newest first, and whether more follow."""

    async def cancel_task(self, identity: IdentityT, task_id: str) -> dict[str, Any]:
        """Cancel the caller's task; returns it, or raises JsonRpcError."""

    async def call_tool(
        self, identity: IdentityT, name: str, arguments: dict[str, Any], link: CallLink
    ) -> dict[str, Any] | None:
        """A CallToolResult, or None when the caller has no such tool (missing or forbidden)."""
