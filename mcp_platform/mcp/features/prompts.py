"""prompts/list and prompts/get. An unknown or forbidden prompt, and missing required
arguments, are -32602."""

from __future__ import annotations

from typing import Any

from mcp_platform.mcp.features.paging import Pager
from mcp_platform.mcp.host import Identity, Requester, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError


async def list_prompts(host: ToolHost[Any], identity: Identity, params: dict[str, Any], pager: Pager) -> dict[str, Any]:
    items = await host.list_prompts(identity)
    return pager.page(items, params, key="prompts", scope=f"prompts/list:{identity.subject}")


def string_arguments(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise JsonRpcError(INVALID_PARAMS, f"{what} must be an object of strings")
    return value


async def get(host: ToolHost[Any], identity: Identity, params: dict[str, Any], requester: Requester) -> dict[str, Any]:
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise JsonRpcError(INVALID_PARAMS, "prompts/get needs params.name (a string)")
    arguments = string_arguments(params.get("arguments"), "params.arguments")
    result = await host.get_prompt(identity, name, arguments, requester)
    if result is None:
        raise JsonRpcError(INVALID_PARAMS, f"Unknown prompt: {name}")
    return result
