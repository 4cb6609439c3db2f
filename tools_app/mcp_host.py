"""The platform side of the MCP engine: identities from the catalog, tools from the registry."""

from __future__ import annotations

from typing import Any

from mcp_platform.mcp.calls import CallLink
from mcp_platform.mcp.host import AuthError
from tenants.principal import Principal
from tools_app.catalog import AuthFailure, CatalogCache
from tools_app.execution import tool_call


class PlatformToolHost:
    def __init__(self, cache: CatalogCache) -> None:
        self._cache = cache

    async def authenticate(self, endpoint: str, authorization: str | None) -> Principal:
        try:
            return await self._cache.authenticate(endpoint, authorization)
        except AuthFailure as exc:
            raise AuthError(exc.status, exc.message) from None

    async def list_tools(self, identity: Principal) -> list[dict[str, Any]]:  # type: ignore[override]
        visible = await self._cache.visible(identity)
        return [tool.wire for tool in visible.tools]

    async def call_tool(
        self, identity: Principal, name: str, arguments: dict[str, Any], link: CallLink
    ) -> dict[str, Any] | None:  # type: ignore[override]
        visible = await self._cache.visible(identity)
        tool = visible.by_name.get(name)
        if tool is None:
            return None
        return await tool_call(tool, arguments, link)
