"""Tool backends: each kind is a module with the same small interface.

``validate_config(config)`` raises ``BackendConfigError`` with a message for the admin;
``async call(tool, arguments, ctx)`` returns the handler's output (normalized later) or
raises ``ToolError`` (a message for the model) or ``BackendError`` (with ``retryable``).
"""

from __future__ import annotations

from types import ModuleType

from tools_app.backends import python_handler
from tools_app.backends.base import BackendConfigError, BackendError

BACKENDS: dict[str, ModuleType] = {"python": python_handler}


def backend_for(kind: str) -> ModuleType:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise BackendConfigError(f"unknown backend kind {kind!r}") from None


__all__ = ["BACKENDS", "BackendConfigError", "BackendError", "backend_for"]
