"""Reads about tools: the catalog a tenant may draw from and what a credential sees."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

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
