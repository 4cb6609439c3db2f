"""What both revisions' ``tools/call`` read from the request before anything else."""

from __future__ import annotations

from typing import Any

from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError


def call_params(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool's name and its arguments (none given: an empty object), or -32602."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise JsonRpcError(INVALID_PARAMS, "params.arguments must be an object")
    return name, arguments
