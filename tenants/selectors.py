"""Reads about tenants, memberships and credentials. Every query starts from a tenant, a
user, or the signed-in user's ``TenantScope`` (``tenants.scope``)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from tenants.models import ApiKey, Membership, Tenant
from tenants.scope import TenantScope


def tenant_active_by_slug(slug: str) -> Tenant | None:
    """The active tenant with this slug; None for unknown and inactive alike."""
    return Tenant.objects.filter(slug=slug, is_active=True).first()


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
