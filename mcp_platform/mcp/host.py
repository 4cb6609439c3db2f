"""What the MCP engine needs from the platform: identities, tools, resources, prompts and
completions.

The engine knows nothing about tenants, models or backends; ``tools_app`` implements this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from mcp_platform.mcp.calls import CallLink, Relayed
from mcp_platform.mcp.shapes import CallToolResult, CreateTaskResult, DetailedTask, Task, Tool


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


@dataclass(frozen=True)
class Requester:
    """Where a read or a prompt request comes from, beyond the identity: for the audit row,
    and ``link``, through which a handler may ask the client (elicitation, sampling) as a
    tool call does: a request on the POST stream (legacy), a multi-round result (2026-07-28)."""

    session_id: str = ""
    client_info: Mapping[str, Any] = field(default_factory=dict)
    protocol_version: str = ""
    link: CallLink | None = None


# The engine hands each host method the identity that host's authenticate() returned, so a
# host may take its own identity type (the platform's Principal).
IdentityT = TypeVar("IdentityT", bound=Identity)


class ToolHost(Protocol[IdentityT]):
    async def authenticate(self, endpoint: str, authorization: str | None, origin: str) -> IdentityT:
        """The caller of ``/mcp/<endpoint>``; raises AuthError. ``origin`` is the scheme and
        authority the request was sent to (``http://127.0.0.1:8000``): an OAuth token must
        be meant for the endpoint's URL there."""

    def call_ahead(self, endpoint: str, authorization: str | None) -> Callable[[], None] | None:
        """What begins admitting a tools/call of this caller (its limits), for a request that
        looks like one, to run before ``authenticate`` so both share a round trip; None when
        there is nothing to begin or the credential is not one the host can vouch for without
        I/O. No I/O. ``request_ended`` gives back what no call used."""

    def request_ended(self) -> None:
        """The request is answered: undo whatever ``call_ahead`` began that no call of the
        request used. No I/O awaited."""

    def authorize(self, identity: IdentityT, method: str) -> None:
        """Raise AuthError (403) when the identity may not send ``method`` at all (an OAuth
        token without the scope it needs). No I/O: called for every request message."""

    async def list_tools(self, identity: IdentityT) -> list[Tool]:
        """The caller's visible tools as MCP Tool objects, in a stable order."""

    async def revalidate(self, identity: IdentityT) -> IdentityT | None:
        """The identity as it stands now (scopes may have changed); None once it is no longer
        valid (key revoked or expired, tenant deactivated)."""

    async def header_params(self, identity: IdentityT, name: str) -> list[tuple[str, tuple[str, ...]]]:
        """The arguments of a tool the caller may use that clients mirror in ``Mcp-Param-<Name>``
        headers (``x-mcp-header`` in its input schema): (Name, path of property names).
        Empty for tools without any, and for tools the caller may not use."""

    async def task_support(self, identity: IdentityT, name: str) -> str | None:
        """forbidden/optional/required for a tool the caller may use; None when it may not."""

    async def create_task(
        self, identity: IdentityT, name: str, arguments: dict[str, Any], link: CallLink, ttl_ms: int | None
    ) -> CreateTaskResult:
        """Start a task-augmented call."""

    async def get_task(self, identity: IdentityT, task_id: str) -> Task | None:
        """The caller's task, or None (missing and foreign look the same)."""

    async def task_result(self, identity: IdentityT, task_id: str) -> CallToolResult:
        """Wait for the task to end; its result, or raise JsonRpcError."""

    async def list_tasks(self, identity: IdentityT, offset: int, limit: int) -> tuple[list[Task], bool]:
        """A page of the caller's tasks, newest first, and whether more follow."""

    async def cancel_task(self, identity: IdentityT, task_id: str) -> Task:
        """Cancel the caller's task; returns it, or raises JsonRpcError (2025-11-25: a task
        that already ended cannot be cancelled)."""

    async def detailed_task(self, identity: IdentityT, task_id: str) -> DetailedTask | None:
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
    ) -> CallToolResult | DetailedTask | Relayed | None:
        """A CallToolResult, or None when the caller has no such tool (missing or forbidden);
        Relayed when a worker ran the call and wrote its response to the stream's log. When
        ``link.may_become_task``, the host may make the call a task and return it
        (``resultType: "task"``) instead."""

    async def recover_run(self, run_id: str, worker: str) -> None:
        """The worker the run's stream names (``worker``) stopped beating, or the run outlived
        its deadline (see liveness.py): run it again or fail it, either way writing its
        stream's end. Safe to call often, from any number of processes."""

    # --- resources, prompts, completion (era-agnostic; see mcp_platform.mcp.features) ---------

    async def visible_digests(self, identity: IdentityT) -> Mapping[str, str]:
        """A fingerprint per list ("tools", "resources" with templates, "prompts"); each changes
        exactly when that list as the caller sees it does."""

    async def list_resources(self, identity: IdentityT) -> list[dict[str, Any]]:
        """The caller's visible resources as MCP Resource objects, in a stable order."""

    async def list_resource_templates(self, identity: IdentityT) -> list[dict[str, Any]]:
        """The caller's visible resource templates as MCP ResourceTemplate objects, in a stable order."""

    async def resource_exists(self, identity: IdentityT, uri: str) -> bool:
        """Whether the caller may read ``uri`` (a visible resource, or a visible template matches it)."""

    async def read_resource(self, identity: IdentityT, uri: str, requester: Requester) -> dict[str, Any] | None:
        """A ReadResourceResult with at least one content; None when the caller has no such
        resource (missing and forbidden look the same). Raises JsonRpcError when reading fails."""

    async def list_prompts(self, identity: IdentityT) -> list[dict[str, Any]]:
        """The caller's visible prompts as MCP Prompt objects, in a stable order."""

    async def get_prompt(
        self, identity: IdentityT, name: str, arguments: dict[str, str], requester: Requester
    ) -> dict[str, Any] | None:
        """A GetPromptResult; None when the caller has no such prompt. Raises JsonRpcError
        (-32602 for missing required arguments)."""

    async def complete(
        self, identity: IdentityT, ref: Mapping[str, Any], argument: str, value: str, context: Mapping[str, str]
    ) -> dict[str, Any] | None:
        """A Completion ({values, total?, hasMore?}) for an argument of a prompt (ref/prompt) or
        a variable of a resource template (ref/resource); None when the caller has no such ref."""
