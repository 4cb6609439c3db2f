"""Reads about tenants and credentials. Every query starts from a tenant."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.utils import timezone

from tenants import keys
from tenants.models import ApiKey, Membership, Tenant
from tenants.principal import Principal


def tenant_active_by_slug(slug: str) -> Tenant | None:
    """The active tenant with this slug; None for unknown and inactive alike."""
    return Tenant.objects.filter(slug=slug, is_active=True).first()


def api_keys_of(tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant)


def principal_for_key(tenant: Tenant, key: ApiKey) -> Principal:
    return Principal(
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        key_id=key.pk,
        key_name=key.name,
        key_prefix=key.prefix,
        scopes=frozenset(key.scopes or []),
    )


def anonymous_principal(tenant: Tenant) -> Principal:
    return Principal(
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        key_id=None,
        key_name="anonymous",
        key_prefix="",
        scopes=frozenset(),
    )


def authenticate_api_key(tenant: Tenant, raw_key: str) -> Principal | None:
    """The principal for a raw key of this tenant, or None for anything unusable.

    Unknown, other tenant's, revoked and expired keys all answer None so callers cannot
    tell them apart.
    """
    prefix = keys.parse_prefix(raw_key)
    if prefix is None:
        return None
    key = api_keys_of(tenant).filter(prefix=prefix).first()
    if key is None or not keys.key_matches(raw_key, key.key_hash) or not key.is_usable(timezone.now()):
        return None
    return principal_for_key(tenant, key)


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
