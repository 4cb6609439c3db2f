"""resources/list, resources/templates/list, resources/read, resources/subscribe and
resources/unsubscribe.

A resource the caller may not read answers exactly like one that does not exist: -32002
"Resource not found" with ``data.uri`` (the 2025-11-25 code; a later revision maps it to
its own). A read never answers an empty ``contents``.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp_platform.mcp.features.paging import Pager
from mcp_platform.mcp.host import Identity, Requester, ToolHost
from mcp_platform.mcp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError

RESOURCE_NOT_FOUND = -32002
MAX_URI_LENGTH = 4096


class Subscriptions(Protocol):
    """The calling session's subscribed URIs."""

    async def add(self, uri: str) -> bool:
        """False when the session may not hold more subscriptions."""

    async def remove(self, uri: str) -> None: ...


def not_found(uri: str) -> JsonRpcError:
    return JsonRpcError(RESOURCE_NOT_FOUND, "Resource not found", data={"uri": uri})


def requested_uri(params: dict[str, Any]) -> str:
    uri = params.get("uri")
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_LENGTH:
        raise JsonRpcError(INVALID_PARAMS, "params.uri (a URI string) is required")
    return uri


async def list_resources(
    host: ToolHost[Any], identity: Identity, params: dict[str, Any], pager: Pager
) -> dict[str, Any]:
    items = await host.list_resources(identity)
    return pager.page(items, params, key="resources", scope=f"resources/list:{identity.subject}")


async def list_templates(
    host: ToolHost[Any], identity: Identity, params: dict[str, Any], pager: Pager
) -> dict[str, Any]:
    items = await host.list_resource_templates(identity)
    return pager.page(items, params, key="resourceTemplates", scope=f"resources/templates/list:{identity.subject}")


async def read(host: ToolHost[Any], identity: Identity, params: dict[str, Any], requester: Requester) -> dict[str, Any]:
    uri = requested_uri(params)
    result = await host.read_resource(identity, uri, requester)
    if result is None:
        raise not_found(uri)
    if not result.get("contents"):
        raise JsonRpcError(INTERNAL_ERROR, "The resource has no content")
    return result


async def subscribe(
    host: ToolHost[Any], identity: Identity, params: dict[str, Any], subscriptions: Subscriptions
) -> dict[str, Any]:
    uri = requested_uri(params)
    if not await host.resource_exists(identity, uri):
        raise not_found(uri)
    if not await subscriptions.add(uri):
        raise JsonRpcError(INVALID_PARAMS, "Too many subscriptions in this session; unsubscribe from some first")
    return {}


async def unsubscribe(
    host: ToolHost[Any], identity: Identity, params: dict[str, Any], subscriptions: Subscriptions
) -> dict[str, Any]:
    await subscriptions.remove(requested_uri(params))
    return {}
