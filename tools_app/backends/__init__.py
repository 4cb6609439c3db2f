"""Tool backends: each kind is a module with the same small interface.

``validate_config(config)`` raises ``BackendConfigError`` with a message for the admin;
``async call(tool, arguments, ctx)`` returns the handler's output (normalized later) or
raises ``ToolError`` (a message for the model) or ``BackendError`` (with ``retryable``).
A backend that runs blocking code in a thread marks ``ctx.blocking`` and sets
``ctx.handler_returned`` from that thread when it really stopped; for everything else
``execute`` sets it when ``call`` returns (a worker that does not see it set after a
timeout or cancellation kills its process).
Optionally ``check_references(config, tenant_id=...)`` raises ``BackendConfigError`` when
the settings name something (a secret, an upstream server) the tool's tenant lacks.
"""

from __future__ import annotations

from types import ModuleType

from tools_app.backends import http, python_handler, upstream_mcp
from tools_app.backends.base import BackendConfigError, BackendError

BACKENDS: dict[str, ModuleType] = {"python": python_handler, "http": http, "upstream_mcp": upstream_mcp}


def backend_for(kind: str) -> ModuleType:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise BackendConfigError(f"unknown backend kind {kind!r}") from None


__all__ = ["BACKENDS", "BackendConfigError", "BackendError", "backend_for"]
