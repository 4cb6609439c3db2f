"""Reads about the catalog: what a tenant may draw from, what a credential sees, and the
tools, resources, templates, prompts and rules a signed-in user manages (through their
``TenantScope``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from django.db import connection
from django.db.models import Model, Q, QuerySet

from tenants.scope import TenantScope
from tenants.selectors import quoted_column
from tools_app.catalog import spec_rows
from tools_app.catalog.models import AccessRule, CatalogEntry, Prompt, Resource, ResourceTemplate, Tool, ToolCuration
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
    """The platform catalog and the tenant's private one together (what the cache holds as two
    parts, the platform's shared by every tenant)."""
    platform, own = platform_catalog(), tenant_catalog(tenant_id)
    return CatalogSnapshot(
        tools=platform.tools + own.tools,
        rules=platform.rules + own.rules,
        resources=platform.resources + own.resources,
        templates=platform.templates + own.templates,
        prompts=platform.prompts + own.prompts,
    )


@dataclass(frozen=True)
class CatalogPart:
    """The enabled entries of one catalog with the enabled rules kept with it: the platform's
    (entries and rules without a tenant, shared by every tenant's cached snapshot) or one
    tenant's (its private entries and the rules that name it)."""

    tools: tuple[ToolSpec, ...] = ()
    rules: tuple[RuleSpec, ...] = ()
    resources: tuple[ResourceSpec, ...] = ()
    templates: tuple[TemplateSpec, ...] = ()
    prompts: tuple[PromptSpec, ...] = ()
    nbytes: int = 0  # an estimate of the memory this part holds (see ``spec_rows``)


def platform_catalog() -> CatalogPart:
    """The platform's enabled entries and its tenant-wide rules, in 5 queries without the ORM."""
    return _catalog_part(None)


def tenant_catalog(tenant_id: int) -> CatalogPart:
    """A tenant's enabled private entries and the enabled rules that name it, in 5 queries
    without the ORM."""
    return _catalog_part(tenant_id)


def _catalog_part(tenant_id: int | None) -> CatalogPart:
    # Plain SQL: building model instances was most of a cold tenant's cost (about 17 ms of
    # CPU for 8 ORM queries); rows to snapshots directly cost a fraction of it.
    queries = _part_queries()
    params: list[int | bool] = [True] if tenant_id is None else [tenant_id, True]
    which = "platform" if tenant_id is None else "tenant"
    with connection.cursor() as cursor:
        rows = {}
        for kind in ("tools", "rules", "resources", "templates", "prompts"):
            cursor.execute(queries[(kind, which)], params)
            rows[kind] = cursor.fetchall()
    tools = tuple(spec_rows.tool(row) for row in rows["tools"])
    rules = spec_rows.rules(rows["rules"])
    resources = tuple(spec_rows.resource(row) for row in rows["resources"])
    templates = tuple(spec_rows.template(row) for row in rows["templates"])
    prompts = tuple(spec_rows.prompt(row) for row in rows["prompts"])
    nbytes = spec_rows.PART_BYTES + sum(
        spec.nbytes for group in (tools, rules, resources, templates, prompts) for spec in group
    )
    return CatalogPart(
        tools=tuple(spec.value for spec in tools),
        rules=tuple(spec.value for spec in rules),
        resources=tuple(spec.value for spec in resources),
        templates=tuple(spec.value for spec in templates),
        prompts=tuple(spec.value for spec in prompts),
        nbytes=nbytes,
    )


@cache
def _part_queries() -> dict[tuple[str, str], str]:
    """The SELECT of each kind, for the platform's part and for a tenant's (built once)."""
    quote = connection.ops.quote_name

    def select(model: type[Model], columns: tuple[str, ...], *, tenant_column: str = "tenant_id") -> dict[str, str]:
        table = quote(model._meta.db_table)
        listed = ", ".join(quoted_column(model, name) for name in columns)
        base = f"SELECT {listed} FROM {table}"
        return {
            "platform": f"{base} WHERE {table}.{quote(tenant_column)} IS NULL AND {table}.{quote('enabled')} = %s",
            "tenant": f"{base} WHERE {table}.{quote(tenant_column)} = %s AND {table}.{quote('enabled')} = %s",
        }

    queries: dict[tuple[str, str], str] = {}
    # Tools with their curations (one LEFT JOIN): the snapshot holds tools as published.
    tool_table, curation_table = quote(Tool._meta.db_table), quote(ToolCuration._meta.db_table)
    tool_columns = [quoted_column(Tool, name) for name in spec_rows.TOOL_COLUMNS]
    tool_columns += [quoted_column(ToolCuration, name) for name in spec_rows.CURATION_COLUMNS]
    tools_base = (
        f"SELECT {', '.join(tool_columns)} FROM {tool_table} LEFT JOIN {curation_table} "
        f"ON {quoted_column(ToolCuration, 'tool')} = {tool_table}.{quote('id')}"
    )
    tool_enabled = f"{tool_table}.{quote('enabled')} = %s"
    queries[("tools", "platform")] = f"{tools_base} WHERE {tool_table}.{quote('tenant_id')} IS NULL AND {tool_enabled}"
    queries[("tools", "tenant")] = f"{tools_base} WHERE {tool_table}.{quote('tenant_id')} = %s AND {tool_enabled}"
    for kind, model, columns in (
        ("resources", Resource, spec_rows.RESOURCE_COLUMNS),
        ("templates", ResourceTemplate, spec_rows.TEMPLATE_COLUMNS),
        ("prompts", Prompt, spec_rows.PROMPT_COLUMNS),
    ):
        for which, sql in select(model, columns).items():
            queries[(kind, which)] = sql
    # Rules with the keys they name: one row per (rule, key), one with a NULL key for a rule naming none.
    through = AccessRule.api_keys.through
    rule_table, link = quote(AccessRule._meta.db_table), quote(through._meta.db_table)
    listed = ", ".join(quoted_column(AccessRule, name) for name in spec_rows.RULE_COLUMNS)
    base = (
        f"SELECT {listed}, {quoted_column(through, 'apikey')} FROM {rule_table} "
        f"LEFT JOIN {link} ON {quoted_column(through, 'accessrule')} = {rule_table}.{quote('id')}"
    )
    enabled = f"{rule_table}.{quote('enabled')} = %s"
    queries[("rules", "platform")] = f"{base} WHERE {rule_table}.{quote('tenant_id')} IS NULL AND {enabled}"
    queries[("rules", "tenant")] = f"{base} WHERE {rule_table}.{quote('tenant_id')} = %s AND {enabled}"
    return queries


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
