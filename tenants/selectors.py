"""Reads about tenants, memberships and credentials. Every query starts from a tenant or a user."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from tenants.models import ApiKey, Membership, Tenant


def tenant_active_by_slug(slug: str) -> Tenant | None:
    """The active tenant with this slug; None for unknown and inactive alike."""
    return Tenant.objects.filter(slug=slug, is_active=True).first()


def api_keys_of(tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant)


def tenants_operated_by(user: AbstractBaseUser) -> QuerySet[Tenant]:
    """Tenants whose live state (sessions, calls) the user may watch and act on: all for
    superusers, else those where the user is an operator, admin or owner."""
    if getattr(user, "is_superuser", False):
        return Tenant.objects.all()
    roles = [Membership.Role.OWNER, Membership.Role.ADMIN, Membership.Role.OPERATOR]
    return Tenant.objects.filter(memberships__user_id=user.pk, memberships__role__in=roles).distinct()


def tenants_administered_by(user_id: int) -> QuerySet[Tenant]:
    """Tenants where the user is an owner or admin."""
    roles = [Membership.Role.OWNER, Membership.Role.ADMIN]
    return Tenant.objects.filter(memberships__user_id=user_id, memberships__role__in=roles).distinct()


def memberships_listed_for(user_id: int) -> list[tuple[str, str]]:
    """(tenant slug, role) of each of the user's memberships in active tenants, by slug (an
    inactive tenant is closed to its members as it is to its MCP clients)."""
    rows = Membership.objects.filter(user_id=user_id, tenant__is_active=True).order_by("tenant__slug")
    return list(rows.values_list("tenant__slug", "role"))
