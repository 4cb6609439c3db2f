"""completion/complete: values for a prompt's argument or a resource template's variable."""

from __future__ import annotations

from typing import Any

from mcp_platform.mcp.features.prompts import string_arguments
from mcp_platform.mcp.host import Identity, ToolHost
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError

MAX_VALUES = 100  # the spec's limit per answer


async def complete(host: ToolHost[Any], identity: Identity, params: dict[str, Any]) -> dict[str, Any]:
    ref = params.get("ref")
    argument = params.get("argument")
    if not isinstance(ref, dict) or ref.get("type") not in ("ref/prompt", "ref/resource"):
        raise JsonRpcError(
            INVALID_PARAMS, 'params.ref must be {"type": "ref/prompt", "name"} or {"type": "ref/resource", "uri"}'
        )
    field = "name" if ref["type"] == "ref/prompt" else "uri"
    if not isinstance(ref.get(field), str) or not ref[field]:
        raise JsonRpcError(INVALID_PARAMS, f"params.ref.{field} (a string) is required")
    if (
        not isinstance(argument, dict)
        or not isinstance(argument.get("name"), str)
        or not isinstance(argument.get("value"), str)
    ):
        raise JsonRpcError(INVALID_PARAMS, "params.argument must be {name, value} (strings)")
    context = params.get("context")
    context_arguments = string_arguments(
        context.get("arguments") if isinstance(context, dict) else None, "params.context.arguments"
    )
    completion = await host.complete(identity, ref, argument["name"], argument["value"], context_arguments)
    if completion is None:
        what = "prompt" if ref["type"] == "ref/prompt" else "resource template"
        raise JsonRpcError(INVALID_PARAMS, f"Unknown {what}: {ref[field]}")
    values = [value for value in completion.get("values", []) if isinstance(value, str)]
    total = completion.get("total")
    if not isinstance(total, int) or isinstance(total, bool) or total < len(values):
        total = len(values)
    has_more = bool(completion.get("hasMore")) or total > MAX_VALUES
    return {"completion": {"values": values[:MAX_VALUES], "total": total, "hasMore": has_more}}
