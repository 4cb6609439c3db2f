"""The production credential check and catalog, called the way a fresh server process would.

Tests use these instead of second implementations: ``authenticate`` is the hot path's
``TenantDirectory.authenticate``, ``visible_names`` the catalog cache's ``visible``, each
with the per-process caches emptied first (in a test transaction nothing commits, so no
generation moves to tell the caches that rows changed).
"""

from __future__ import annotations

from asgiref.sync import async_to_sync

from tenants.auth import AuthFailure, tenant_directory
from tenants.models import ApiKey, Tenant
from tenants.principal import Principal
from tools_app.catalog.cache import catalog_cache
from tools_app.catalog.spec import ToolSpec


def authenticate(tenant: Tenant, raw_key: str) -> Principal | None:
    """The principal the MCP endpoint of ``tenant`` resolves for this raw key, or None when refused."""
    tenant_directory.clear()
    try:
        return async_to_sync(tenant_directory.authenticate)(tenant.slug, f"Bearer {raw_key}")
    except AuthFailure:
        return None


def visible(principal: Principal) -> list[ToolSpec]:
    """The tools ``principal`` may list and call, in tools/list order."""
    tenant_directory.clear()
    catalog_cache.clear()
    return list(async_to_sync(catalog_cache.visible)(principal).tools)


def visible_names(principal: Principal) -> list[str]:
    return [tool.name for tool in visible(principal)]


def principal_of(tenant: Tenant, key: ApiKey | None = None) -> Principal:
    """The principal a request with ``key`` (None: anonymous) resolves to, built from the rows."""
    if key is None:
        return Principal(tenant.pk, tenant.slug, None, "anonymous", "", frozenset())
    return Principal(tenant.pk, tenant.slug, key.pk, key.name, key.prefix, frozenset(key.scopes or []))
