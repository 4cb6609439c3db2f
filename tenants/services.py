"""Writes about tenants and credentials."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants import keys
from tenants.models import SCOPE_VALIDATOR, ApiKey, Membership, Tenant


@transaction.atomic
def tenant_create(*, slug: str, name: str, allow_anonymous: bool = False) -> Tenant:
    tenant = Tenant(slug=slug, name=name, allow_anonymous=allow_anonymous)
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str] | None = None,
    expires_at: datetime | None = None,
    created_by: AbstractBaseUser | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; returns it with the raw key, which is never stored or shown again."""
    scopes = list(scopes or [])
    for scope in scopes:
        SCOPE_VALIDATOR(scope)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    generated = keys.generate_key()
    key = ApiKey(
        tenant=tenant,
        name=name,
        scopes=scopes,
        expires_at=expires_at,
        prefix=generated.prefix,
        key_hash=generated.hashed,
        created_by=created_by,
    )
    key.full_clean(exclude=["prefix", "key_hash"])
    key.save()
    return key, generated.raw


@transaction.atomic
def api_key_revoke(*, key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


@transaction.atomic
def membership_set(*, tenant: Tenant, user: AbstractBaseUser, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    return membership
