"""Writes about tenants and credentials."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants import keys
from tenants.models import SCOPE_VALIDATOR, ApiKey, Membership, Tenant, ToolListing

TENANT_FIELDS = (
    "slug",
    "name",
    "is_active",
    "allow_anonymous",
    "api_keys_enabled",
    "calls_per_minute",
    "max_concurrent_calls",
    "tool_listing",
)


@transaction.atomic
def tenant_create(
    *,
    slug: str,
    name: str,
    allow_anonymous: bool = False,
    api_keys_enabled: bool = True,
    is_active: bool = True,
    calls_per_minute: int | None = None,
    max_concurrent_calls: int | None = None,
    tool_listing: str = ToolListing.LIST,
) -> Tenant:
    tenant = Tenant(
        slug=slug,
        name=name,
        allow_anonymous=allow_anonymous,
        api_keys_enabled=api_keys_enabled,
        is_active=is_active,
        calls_per_minute=calls_per_minute,
        max_concurrent_calls=max_concurrent_calls,
        tool_listing=tool_listing,
    )
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def tenant_update(*, tenant: Tenant, changes: dict[str, Any]) -> Tenant:
    """Apply ``changes`` (a subset of ``TENANT_FIELDS``); raises ValidationError per field."""
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise ValueError(f"not tenant fields: {sorted(unknown)}")
    for field, value in changes.items():
        setattr(tenant, field, value)
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def tenant_delete(*, tenant: Tenant) -> None:
    """Delete the tenant with everything it owns (keys, memberships, private tools, rules)."""
    tenant.delete()


def _check_key_name_free(*, tenant_id: int, name: str, exclude_pk: int | None = None) -> None:
    # The database constraint says the same, but its message names the constraint.
    same_name = ApiKey.objects.filter(tenant_id=tenant_id, name=name)
    if exclude_pk is not None:
        same_name = same_name.exclude(pk=exclude_pk)
    if same_name.exists():
        raise ValidationError({"name": f"The tenant already has an API key named {name!r}."})


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str] | None = None,
    expires_at: datetime | None = None,
    created_by: User | None = None,
    tool_listing: str = "",
) -> tuple[ApiKey, str]:
    """Create a key; returns it with the raw key, which is never stored or shown again."""
    scopes = list(scopes or [])
    for scope in scopes:
        SCOPE_VALIDATOR(scope)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    _check_key_name_free(tenant_id=tenant.pk, name=name)
    generated = keys.generate_key()
    key = ApiKey(
        tenant=tenant,
        name=name,
        scopes=scopes,
        expires_at=expires_at,
        prefix=generated.prefix,
        key_hash=generated.hashed,
        created_by=created_by,
        tool_listing=tool_listing,
    )
    key.full_clean(exclude=["prefix", "key_hash"])
    key.save()
    return key, generated.raw


API_KEY_EDITABLE_FIELDS = ("name", "scopes", "expires_at", "tool_listing")


@transaction.atomic
def api_key_update(*, key: ApiKey, changes: dict[str, Any]) -> ApiKey:
    """Rename a key, change its scopes, its expiry (None: never expires) or its tool listing ("": the tenant's)."""
    unknown = set(changes) - set(API_KEY_EDITABLE_FIELDS)
    if unknown:
        raise ValueError(f"not editable key fields: {sorted(unknown)}")
    if "scopes" in changes:
        scopes = list(changes["scopes"] or [])
        for scope in scopes:
            SCOPE_VALIDATOR(scope)
        key.scopes = scopes
    expires_at = changes.get("expires_at")
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    if "expires_at" in changes:
        key.expires_at = expires_at
    if "tool_listing" in changes:
        key.tool_listing = changes["tool_listing"] or ""
    if "name" in changes:
        _check_key_name_free(tenant_id=key.tenant_id, name=changes["name"], exclude_pk=key.pk)
        key.name = changes["name"]
    key.full_clean(exclude=["prefix", "key_hash"])
    key.save()
    return key


@transaction.atomic
def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


@transaction.atomic
def membership_set(*, tenant: Tenant, user: User, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    return membership


LAST_OWNER_MESSAGE = "This is the tenant's last owner; make someone else an owner first."


def _is_last_owner(membership: Membership) -> bool:
    # Locking every owner row of the tenant serializes concurrent demotions, so two owners
    # cannot demote each other at the same moment and leave the tenant without one.
    owners = Membership.objects.select_for_update().filter(tenant_id=membership.tenant_id, role=Membership.Role.OWNER)
    return list(owners.values_list("pk", flat=True)) == [membership.pk]


@transaction.atomic
def membership_add(*, tenant: Tenant, user: User, role: str) -> Membership:
    """A new membership; raises ValidationError when the user already is a member."""
    if Membership.objects.filter(tenant=tenant, user=user).exists():
        raise ValidationError({"user": f"{user} is already a member of {tenant}; change that membership's role."})
    membership = Membership(tenant=tenant, user=user, role=role)
    membership.full_clean(validate_constraints=False)
    membership.save()
    return membership


@transaction.atomic
def membership_change_role(*, membership: Membership, role: str) -> Membership:
    """Raises ValidationError when this would leave a tenant that had an owner without one."""
    if role != Membership.Role.OWNER and _is_last_owner(membership):
        raise ValidationError({"role": LAST_OWNER_MESSAGE})
    membership.role = role
    membership.full_clean(validate_constraints=False)
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership) -> None:
    """Raises ValidationError for the last owner of a tenant."""
    if _is_last_owner(membership):
        raise ValidationError({"role": LAST_OWNER_MESSAGE})
    membership.delete()
