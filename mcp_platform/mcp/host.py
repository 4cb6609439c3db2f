"""What the MCP engine needs from the platform: identities and tools.

The engine knows nothing about tenants, models or backends; ``tools_app`` implements this.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

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

    @property
    def label(self) -> str:
        """How operators see the credential (never the secret itself)."""


# The engine hands each host method the identity that host's authenticate() returned, so a
# host may take its own identity type (the platform's Principal).
IdentityT = TypeVar("IdentityT", bound=Identity)


class ToolHost(Protocol[IdentityT]):
    async def authenticate(self, endpoint: str, authorization: str | None) -> IdentityT:
        """The caller of ``/mcp/<endpoint>``; raises AuthError."""

    async def list_tools(self, identity: IdentityT) -> list[dict[str, Any]]:
        """The caller's visible tools as MCP Tool objects, in a stable order."""

    async def revalidate(self, identity: IdentityT) -> IdentityT | None:
        """The identity as it stands now (scopes may have changed); None once it is no longer
        valid (key revoked or expired, tenant deactivated)."""

    async def visible_digest(self, identity: IdentityT) -> str:
        """A fingerprint of the caller's visible tool list; it changes exactly when the list does."""

    async def header_params(self, identity: IdentityT, name: str) -> list[tuple[str, tuple[str, ...]]]:
        """The arguments of a tool the caller may use that clients mirror in ``Mcp-Param-<Name>``
        headers (``x-mcp-header`` in its input schema): (Name, path of property names).
        Empty for tools without any, and for tools the caller may not use."""

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
        """Cancel the caller's task; returns it, or raises JsonRpcError (2025-11-25: a task
        that already ended cannot be cancelled)."""

    async def detailed_task(self, identity: IdentityT, task_id: str) -> dict[str, Any] | None:
        """The caller's task as a 2026-07-28 DetailedTask (its inputRequests, result or
        error inlined), or None (missing and foreign look the same)."""

    async def answer_task(self, identity: IdentityT, task_id: str, responses: dict[str, Any]) -> bool:
        """Deliver the client's answers to the caller's task (tasks/update); False when the
        caller has no such task. Answers to requests the task did not make are ignored."""

    async def stop_task(self, identity: IdentityT, task_id: str) -> bool:
        """Cancel the caller's task if it is still active (2026-07-28: idempotent); False
        when the caller has no such task."""

    async def call_tool(
        self, identity: IdentityT, name: str, arguments: dict[str, Any], link: CallLink
    ) -> dict[str, Any] | None:
        """A CallToolResult, or None when the caller has no such tool (missing or forbidden).
        When ``link.may_become_task``, the host may make the call a task and return its
        CreateTaskResult (``resultType: "task"``) instead."""
