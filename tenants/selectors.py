"""Reads about tenants and credentials. Every query starts from a tenant."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from tenants.models import ApiKey, Membership, Tenant


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


def membership_roles_of(user_id: int) -> dict[int, str]:
    """Tenant id → the user's role there, for active tenants only (an inactive tenant is
    closed to its members as it is to its MCP clients)."""
    rows = Membership.objects.filter(user_id=user_id, tenant__is_active=True).values_list("tenant_id", "role")
    return dict(rows)
