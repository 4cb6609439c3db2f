"""The interface every backend kind shares: ``Backend``, its errors, and the context a call
runs in.

Backends run below the call runtime (``tools_app.runs``), which hands them its
``ToolContext``; they see it only through ``CallContext``, the part they use.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import Any, ClassVar, Literal, Protocol

from tools_app.catalog.backend_kinds import BackendConfigError
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec, ToolSpec

Feature = Literal["tool", "resource", "template", "prompt"]
ContentEntry = ResourceSpec | TemplateSpec | PromptSpec


class BackendError(Exception):
    """A backend failed to produce a result; ``retryable`` says whether a retry could help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class CallContext(Protocol):
    """What a backend may do for the call it runs besides returning a result."""

    tool_name: str
    # A backend that runs blocking code in a thread sets ``blocking`` and sets
    # ``handler_returned`` (taken before the thread starts) from that thread once the code
    # really stopped.
    blocking: bool

    @property
    def handler_returned(self) -> threading.Event: ...

    @property
    def cancelled(self) -> bool: ...

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...

    async def log(self, level: str, data: Any, *, logger: str | None = None) -> None: ...

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]: ...

    async def sample(self, messages: list[dict[str, Any]], *, max_tokens: int, **options: Any) -> dict[str, Any]: ...


class Backend(ABC):
    """One backend kind (``python``, ``http``, ``upstream_mcp``): how the catalog checks the
    settings of what it runs, and how the call runtime runs it.

    A kind runs tools; the ``features`` it names (``resource``, ``template``, ``prompt``) it
    also serves, and only those. Errors: ``BackendConfigError`` (settings that cannot work,
    the message is for the admin), ``BackendError`` (a run failed; ``retryable`` says whether
    a retry could help), ``ToolError`` (a message for the model).
    """

    kind: ClassVar[str]
    features: ClassVar[frozenset[Feature]] = frozenset()

    @abstractmethod
    def validate_config(self, config: dict[str, Any], *, feature: Feature = "tool") -> None:
        """Raise BackendConfigError when the settings cannot work for ``feature`` (one of
        ``features``, or ``tool``)."""

    def check_references(self, config: dict[str, Any], *, tenant_id: int | None, feature: Feature = "tool") -> None:
        """Raise BackendConfigError when valid settings name something (a secret, an upstream
        server, a handler) the catalog of ``tenant_id`` (None: the platform's) may not use."""
        return  # settings that name nothing outside the tool need no check

    def config_choices(self, *, tenant_ids: Collection[int] | None = None) -> dict[str, list[str]]:
        """The values a setting may take in the catalogs of ``tenant_ids`` (None: every
        catalog), for forms to offer as a select; settings with free values are absent."""
        return {}

    @abstractmethod
    async def call(self, tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
        """The tool's output (normalized by the runtime). A backend that runs blocking code in a
        thread marks ``ctx.blocking`` and sets ``ctx.handler_returned`` from that thread when it
        really stopped; for everything else the runtime sets it when ``call`` returns."""

    async def read_resource(
        self, entry: ResourceSpec | TemplateSpec, uri: str, variables: dict[str, str], *, ctx: CallContext | None
    ) -> list[dict[str, Any]]:
        """The ResourceContents of ``uri``; ``ctx`` lets the backend ask the client for input."""
        raise BackendError(f"the {self.kind} backend serves no resources")

    async def get_prompt(
        self, prompt: PromptSpec, arguments: dict[str, str], *, ctx: CallContext | None
    ) -> dict[str, Any]:
        """A GetPromptResult (at least ``messages``)."""
        raise BackendError(f"the {self.kind} backend serves no prompts")

    async def complete(
        self, entry: ContentEntry, argument: str, value: str, context: dict[str, str]
    ) -> dict[str, Any] | None:
        """Completion values for an argument; None when the backend offers none."""
        return None


__all__ = ["Backend", "BackendConfigError", "BackendError", "CallContext", "ContentEntry", "Feature"]
