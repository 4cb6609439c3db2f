"""Reads about the catalog: what a tenant may draw from, what a credential sees, and the
tools, resources, templates, prompts and rules a signed-in user manages (through their
``TenantScope``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from django.db.models import Q, QuerySet

from tenants.scope import TenantScope
from tools_app.catalog.models import AccessRule, CatalogEntry, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.spec import PromptSpec, ResourceSpec, RuleSpec, TemplateSpec, ToolSpec

E = TypeVar("E", bound=CatalogEntry)


@dataclass(frozen=True)
class CatalogSnapshot:
    """Everything needed to answer visibility questions for one tenant."""

    tools: tuple[ToolSpec, ...]
    rules: tuple[RuleSpec, ...]
    resources: tuple[ResourceSpec, ...] = ()
    templates: tuple[TemplateSpec, ...] = ()
    prompts: tuple[PromptSpec, ...] = ()


def in_catalog_of(tenant_id: int) -> Q:
    """Platform entries plus the tenant's private ones."""
    return Q(tenant__isnull=True) | Q(tenant_id=tenant_id)


def tools_available_to(tenant_id: int) -> QuerySet[Tool]:
    """Platform tools plus the tenant's private ones (enabled or not)."""
    return Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id))


def rules_for_tenant(tenant_id: int) -> QuerySet[AccessRule]:
    """The enabled rules that can apply to the tenant's callers (a disabled rule applies to no one)."""
    return AccessRule.objects.filter(Q(tenant__isnull=True) | Q(tenant_id=tenant_id), enabled=True)


def platform_rules_targeting(tools: Iterable[Tool]) -> QuerySet[AccessRule]:
    """The platform rules that target these tools by id (not by pattern or tag)."""
    return AccessRule.objects.filter(tool__in=list(tools), owner__isnull=True).select_related("tool").order_by("pk")


def tool_metric_labels(pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], str]:
    """How /metrics labels the tool of each (tenant id, name) called: the tenant's private tool
    of that name as ``private:<id>`` (its name is the tenant's), else the platform tool's name;
    a name that is neither is left out (counted as unknown)."""
    pairs = set(pairs)
    rows = Tool.objects.filter(name__in={name for _, name in pairs}).values_list("pk", "tenant_id", "name")
    platform: set[str] = set()
    private: dict[tuple[int, str], int] = {}
    for pk, tenant_id, name in rows:
        if tenant_id is None:
            platform.add(name)
        else:
            private[(tenant_id, name)] = pk
    labels = {}
    for tenant_id, name in pairs:
        if (tenant_id, name) in private:
            labels[(tenant_id, name)] = f"private:{private[(tenant_id, name)]}"
        elif name in platform:
            labels[(tenant_id, name)] = name
    return labels


def catalog_snapshot(tenant_id: int) -> CatalogSnapshot:
    # Curations ride along (one join): the snapshot holds tools as published.
    tools = tuple(
        ToolSpec.from_model(t) for t in tools_available_to(tenant_id).filter(enabled=True).select_related("curation")
    )
    rules = []
    for rule in rules_for_tenant(tenant_id).prefetch_related("api_keys"):
        key_ids = frozenset(k.pk for k in rule.api_keys.all())
        rules.append(RuleSpec.from_model(rule, key_ids))
    available = in_catalog_of(tenant_id) & Q(enabled=True)
    # Static content stays out of the snapshot: it is read on demand (and cached by version).
    resources = Resource.objects.filter(available).defer("text", "blob")
    return CatalogSnapshot(
        tools=tools,
        rules=tuple(rules),
        resources=tuple(ResourceSpec.from_model(r) for r in resources),
        templates=tuple(TemplateSpec.from_model(t) for t in ResourceTemplate.objects.filter(available)),
        prompts=tuple(PromptSpec.from_model(p) for p in Prompt.objects.filter(available)),
    )


def resource_content(resource_id: int, version: int) -> tuple[str, bytes | None] | None:
    """The static content (text, blob) of that version of a resource; None once it changed or went."""
    row = Resource.objects.filter(pk=resource_id, version=version).values_list("text", "blob").first()
    if row is None:
        return None
    text, blob = row
    return text, bytes(blob) if blob is not None else None


def entries_in(
    model: type[E], scope: TenantScope, *, tenant_slug: str | None = None, **exact: str | bool | None
) -> QuerySet[E]:
    """Every entry of ``model`` for platform admins; else the private ones of the user's active
    tenants. ``exact`` narrows to field values (a None value does not narrow)."""
    rows = model._default_manager.filter(scope.within("tenant")).select_related("tenant")
    if tenant_slug is not None:
        rows = rows.filter(tenant__slug=tenant_slug)
    return rows.filter(**{name: value for name, value in exact.items() if value is not None})


def access_rules_in(
    scope: TenantScope,
    *,
    tenant_slug: str | None = None,
    tool_id: int | None = None,
    effect: str | None = None,
    kind: str | None = None,
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
    if kind is not None:
        rules = rules.filter(kind=kind)
    return rules
