"""The interface every backend kind shares: its errors, and the context a call runs in.

Backends run below the call runtime (``tools_app.runs``), which hands them its
``ToolContext``; they see it only through ``CallContext``, the part they use.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from tools_app.catalog.backend_kinds import BackendConfigError


class BackendError(Exception):
    """A backend failed to produce a result; ``retryable`` says whether a retry could help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class CallContext(Protocol):
    """What a backend may do for the call it runs besides returning a result."""

    tool_name: str
    # A backend that runs blocking code in a thread sets ``blocking`` and sets
    # ``handler_returned`` from that thread once the code really stopped.
    blocking: bool
    handler_returned: threading.Event

    @property
    def cancelled(self) -> bool: ...

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...

    async def log(self, level: str, data: Any, *, logger: str | None = None) -> None: ...

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]: ...

    async def sample(self, messages: list[dict[str, Any]], *, max_tokens: int, **options: Any) -> dict[str, Any]: ...


__all__ = ["BackendConfigError", "BackendError", "CallContext"]
