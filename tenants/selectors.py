"""Reads about tenants, memberships and credentials. Every query starts from a tenant, a
user, or the signed-in user's ``TenantScope`` (``tenants.scope``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model, QuerySet
from django.utils.dateparse import parse_datetime

from tenants.models import ApiKey, Membership, Tenant
from tenants.scope import TenantScope


def tenant_active_by_slug(slug: str) -> Tenant | None:
    """The active tenant with this slug; None for unknown and inactive alike."""
    return Tenant.objects.filter(slug=slug, is_active=True).first()


TENANT_COLUMNS = (
    "id",
    "slug",
    "allow_anonymous",
    "api_keys_enabled",
    "calls_per_minute",
    "max_concurrent_calls",
    "tool_listing",
)
KEY_COLUMNS = ("id", "name", "prefix", "key_hash", "scopes", "expires_at", "revoked_at", "tool_listing")


def active_tenant_with_keys(slug: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The active tenant with this slug (``TENANT_COLUMNS``) and its API keys (``KEY_COLUMNS``,
    scopes decoded, times aware); None for unknown and inactive alike.

    One query without the ORM: it runs for every tenant a process sees first, and for every
    unknown slug asked for (briefly remembered by the caller).
    """
    with connection.cursor() as cursor:
        cursor.execute(_tenant_with_keys_sql(), [slug, True])
        rows = cursor.fetchall()
    if not rows:
        return None
    width = len(TENANT_COLUMNS)
    tenant = dict(zip(TENANT_COLUMNS, rows[0][:width], strict=True))
    for flag in ("allow_anonymous", "api_keys_enabled"):
        tenant[flag] = bool(tenant[flag])
    keys = []
    for row in rows:
        if row[width] is None:
            continue  # the tenant has no key
        key = dict(zip(KEY_COLUMNS, row[width:], strict=True))
        scopes = key["scopes"]
        key["scopes"] = json.loads(scopes) if isinstance(scopes, str) else scopes
        key["expires_at"] = aware(key["expires_at"])
        key["revoked_at"] = aware(key["revoked_at"])
        keys.append(key)
    return tenant, keys


def aware(value: datetime | str | None) -> datetime | None:
    """A timestamp column read in plain SQL as an aware datetime: SQLite answers text or a
    naive datetime (its converters drop the zone; Django stores UTC there)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    return parsed.replace(tzinfo=UTC) if parsed is not None and parsed.tzinfo is None else parsed


def quoted_column(model: type[Model], name: str) -> str:
    """``"table"."column"`` of a model's field, for the few reads written in plain SQL."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field), f"{model.__name__}.{name} is no concrete field"
    quote = connection.ops.quote_name
    return f"{quote(model._meta.db_table)}.{quote(str(field.column))}"


@cache
def _tenant_with_keys_sql() -> str:
    quote = connection.ops.quote_name
    tenants, keys = quote(Tenant._meta.db_table), quote(ApiKey._meta.db_table)
    columns = [quoted_column(Tenant, name) for name in TENANT_COLUMNS]
    columns += [quoted_column(ApiKey, name) for name in KEY_COLUMNS]
    return (
        f"SELECT {', '.join(columns)} FROM {tenants} "
        f"LEFT JOIN {keys} ON {quoted_column(ApiKey, 'tenant')} = {tenants}.{quote('id')} "
        f"WHERE {tenants}.{quote('slug')} = %s AND {tenants}.{quote('is_active')} = %s"
    )


def tenant_slugs(ids: Iterable[int]) -> dict[int, str]:
    """Tenant id → slug for these ids (unknown ids are left out)."""
    wanted = set(ids)
    if not wanted:
        return {}
    return dict(Tenant.objects.filter(pk__in=wanted).values_list("pk", "slug"))


def api_keys_of(tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant)


def memberships_listed_for(user_id: int) -> list[tuple[str, str]]:
    """(tenant slug, role) of each of the user's memberships in active tenants, by slug (an
    inactive tenant is closed to its members as it is to its MCP clients)."""
    rows = Membership.objects.filter(user_id=user_id, tenant__is_active=True).order_by("tenant__slug")
    return list(rows.values_list("tenant__slug", "role"))


def tenants_in(
    scope: TenantScope,
    minimum: str = Membership.Role.VIEWER,
    *,
    include_inactive: bool = False,
    slug: str | None = None,
) -> QuerySet[Tenant]:
    """Every tenant for platform admins; else the tenants where the user holds at least
    ``minimum`` (active ones only unless ``include_inactive``). ``slug`` narrows to one."""
    tenants = Tenant.objects.filter(scope.within("pk", minimum, include_inactive=include_inactive))
    return tenants if slug is None else tenants.filter(slug=slug)


def memberships_in(
    scope: TenantScope, *, tenant_slug: str | None = None, username: str | None = None, role: str | None = None
) -> QuerySet[Membership]:
    """Memberships of the user's active tenants (any role sees them), with their tenant and user."""
    memberships = Membership.objects.filter(scope.within("tenant")).select_related("tenant", "user")
    if tenant_slug is not None:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    if username is not None:
        memberships = memberships.filter(user__username=username)
    if role is not None:
        memberships = memberships.filter(role=role)
    return memberships


def api_keys_in(scope: TenantScope, *, tenant_slug: str | None = None, revoked: bool | None = None) -> QuerySet[ApiKey]:
    """MCP API keys of the user's active tenants (any role sees them), with tenant and maker."""
    api_keys = ApiKey.objects.filter(scope.within("tenant")).select_related("tenant", "created_by")
    if tenant_slug is not None:
        api_keys = api_keys.filter(tenant__slug=tenant_slug)
    if revoked is not None:
        api_keys = api_keys.filter(revoked_at__isnull=not revoked)
    return api_keys
