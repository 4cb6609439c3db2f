"""Reads about tools: the catalog a tenant may draw from, what a credential sees, and the
tools and rules a signed-in user manages (through their ``TenantScope``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from tenants.scope import TenantScope
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.spec import RuleSpec, ToolSpec


@dataclass(frozen=True)
class CatalogSnapshot:
    """Everything needed to answer visibility questions for one tenant."""

    tools: tuple[ToolSpec, ...]
    rules: tuple[RuleSpec, ...]


def tools_available_to(tenant_id: int) -> QuerySet[Tool]:
    """Platform tools plus the tenant's private ones (enabled or not)."""
    return Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))


def rules_for_tenant(tenant_id: int) -> QuerySet[AccessRule]:
    return AccessRule.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))


def catalog_snapshot(tenant_id: int) -> CatalogSnapshot:
    tools = tuple(ToolSpec.from_model(t) for t in tools_available_to(tenant_id).filter(enabled=True))
    rules = []
    for rule in rules_for_tenant(tenant_id).prefetch_related("api_keys"):
        key_ids = frozenset(k.pk for k in rule.api_keys.all())
        rules.append(RuleSpec.from_model(rule, key_ids))
    return CatalogSnapshot(tools=tools, rules=tuple(rules))


def tools_in(
    scope: TenantScope,
    *,
    tenant_slug: str | None = None,
    platform_catalog: bool | None = None,
    name: str | None = None,
    enabled: bool | None = None,
) -> QuerySet[Tool]:
    """Every tool for platform admins; else the private tools of the user's active tenants.

    ``platform_catalog`` narrows to platform tools (True) or private ones (False).
    """
    tools = Tool.objects.filter(scope.within("tenant")).select_related("tenant")
    if tenant_slug is not None:
        tools = tools.filter(tenant__slug=tenant_slug)
    if platform_catalog is not None:
        tools = tools.filter(tenant__isnull=platform_catalog)
    if name is not None:
        tools = tools.filter(name=name)
    if enabled is not None:
        tools = tools.filter(enabled=enabled)
    return tools


def access_rules_in(
    scope: TenantScope, *, tenant_slug: str | None = None, tool_id: int | None = None, effect: str | None = None
) -> QuerySet[AccessRule]:
    """Every rule for platform admins; else the rules owned by the user's active tenants.

    ``tenant_slug`` narrows to the rules that apply to that tenant (whoever owns them).
    """
    rules = AccessRule.objects.filter(scope.within("owner"))
    rules = rules.select_related("tool", "tenant", "owner", "created_by").prefetch_related("api_keys")
    if tenant_slug is not None:
        rules = rules.filter(tenant__slug=tenant_slug)
    if tool_id is not None:
        rules = rules.filter(tool_id=tool_id)
    if effect is not None:
        rules = rules.filter(effect=effect)
    return rules
