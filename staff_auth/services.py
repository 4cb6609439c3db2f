"""Writes of staff SSO: starting a sign-in, consuming its callback once, and turning a verified
ID token into a signed-in user whose memberships match their groups.

Linking: a user is found by the provider's subject (``iss`` + ``sub``, stored in
``StaffIdentity``), which never changes for a person. Only at a subject's first sign-in, and
only when the provider vouches for the email (``email_verified``), is an existing user with
that email (exactly one, without an SSO identity yet) linked; an unverified email never
links, since anyone may put any address in an account the provider does not check. With
no such user, one is created (with no usable password) when ``TOOLBAY_SSO_CREATE_USERS``.

Roles, at every sign-in: the groups claim goes through ``TOOLBAY_SSO_ROLE_MAP``. Memberships
SSO created (marked by ``SsoMembership``) follow the groups — changed, created, removed.
Memberships made by hand are left as they are, as are ``is_staff`` / ``is_superuser`` set by
hand; SSO takes back only what it granted. Membership changes are audited like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from authlib.common.security import generate_token
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from staff_auth.models import SsoMembership, SsoSignIn, StaffIdentity
from staff_auth.oidc import SsoError
from staff_auth.roles import Entitlements, entitlements_for, parse_role_map
from tenants.models import Membership, Tenant
from tenants.scope import role_rank
from tenants.services import membership_add, membership_change_role, membership_remove

logger = logging.getLogger(__name__)

# How long the person has at the provider between leaving Toolbay and coming back.
SIGN_IN_SECONDS = 600
STAFF_ROLE = Membership.Role.ADMIN  # tenant admins and owners work in the Django admin


def sign_in_start(*, next_url: str) -> SsoSignIn:
    # Rows of abandoned sign-ins go when the next one starts (they are useless after 10 minutes).
    SsoSignIn.objects.filter(created_at__lt=timezone.now() - timedelta(seconds=SIGN_IN_SECONDS)).delete()
    return SsoSignIn.objects.create(
        state=generate_token(43), nonce=generate_token(43), code_verifier=generate_token(64), next_url=next_url
    )


def sign_in_consume(*, state: str) -> SsoSignIn:
    """The sign-in this callback belongs to, marked used; raises SsoError for an unknown,
    expired or already used ``state``. Of two concurrent callbacks, one gets the row."""
    now = timezone.now()
    taken = SsoSignIn.objects.filter(
        state=state, used_at__isnull=True, created_at__gte=now - timedelta(seconds=SIGN_IN_SECONDS)
    ).update(used_at=now)
    if taken != 1:
        raise SsoError("This sign-in was already used or has expired. Start again.")
    return SsoSignIn.objects.get(state=state)


def _groups(claims: dict[str, Any]) -> list[str]:
    value = claims.get(settings.TOOLBAY_SSO_GROUPS_CLAIM, [])
    if isinstance(value, str):
        value = [value]
    return sorted({str(item) for item in value if isinstance(item, str | int)}) if isinstance(value, list) else []


def _username_for(claims: dict[str, Any]) -> str:
    base = str(claims.get("preferred_username") or claims.get("email") or claims["sub"])[:140]
    candidate, n = base, 1
    while User.objects.filter(username=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _link_or_create(*, issuer: str, claims: dict[str, Any]) -> StaffIdentity:
    email = str(claims.get("email") or "")
    user: User | None = None
    if settings.TOOLBAY_SSO_LINK_BY_EMAIL and email and claims.get("email_verified") is True:
        matches = list(User.objects.filter(email__iexact=email, staff_identity__isnull=True)[:2])
        if len(matches) == 1:
            user = matches[0]
    if user is None:
        if not settings.TOOLBAY_SSO_CREATE_USERS:
            raise SsoError("There is no Toolbay account for you yet; ask an administrator to create one.")
        user = User(username=_username_for(claims), email=email)
        user.set_unusable_password()
        user.save()
    return StaffIdentity.objects.create(user=user, issuer=issuer, subject=str(claims["sub"]))


def _sync_memberships(identity: StaffIdentity, wanted: Entitlements) -> None:
    user = identity.user
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in=list(wanted.tenant_roles))}
    for slug in sorted(set(wanted.tenant_roles) - set(tenants)):
        logger.warning("TOOLBAY_SSO_ROLE_MAP names tenant %r, which does not exist", slug)
    granted = {
        grant.membership.tenant_id: grant.membership for grant in identity.memberships.select_related("membership")
    }
    by_hand = set(
        Membership.objects.filter(user=user).exclude(tenant_id__in=list(granted)).values_list("tenant_id", flat=True)
    )
    for slug, tenant in tenants.items():
        role = wanted.tenant_roles[slug]
        membership = granted.pop(tenant.pk, None)
        if membership is not None:
            if membership.role != role:
                _keeping_last_owner(membership_change_role, membership=membership, role=role)
        elif tenant.pk not in by_hand:
            membership = membership_add(tenant=tenant, user=user, role=role)
            SsoMembership.objects.create(membership=membership, identity=identity)
    for membership in granted.values():  # the group that granted it is gone
        _keeping_last_owner(membership_remove, membership=membership)


def _keeping_last_owner(change: Callable[..., object], *, membership: Membership, **kwargs: str) -> None:
    # A tenant keeps its last owner even when the owner's group is gone: someone must be able
    # to administer it. The next sign-in after another owner exists takes the role back.
    try:
        change(membership=membership, **kwargs)
    except ValidationError:
        logger.warning("SSO kept %s: it is the tenant's last owner", membership)


def _sync_flags(identity: StaffIdentity, wanted: Entitlements) -> None:
    user = identity.user
    granted_roles = Membership.objects.filter(sso_grant__identity=identity).values_list("role", flat=True)
    needs_staff = wanted.platform_admin or any(role_rank(role) >= role_rank(STAFF_ROLE) for role in granted_roles)
    flags_before = (user.is_staff, user.is_superuser)
    if wanted.platform_admin and not user.is_superuser:
        user.is_superuser, identity.granted_superuser = True, True
    elif not wanted.platform_admin and identity.granted_superuser:
        user.is_superuser, identity.granted_superuser = False, False
    if needs_staff and not user.is_staff:
        user.is_staff, identity.granted_staff = True, True
    elif not needs_staff and identity.granted_staff:
        user.is_staff, identity.granted_staff = False, False
    # Saving a user tells every tenant it belongs to that something changed: only when it did.
    if (user.is_staff, user.is_superuser) != flags_before:
        user.save(update_fields=["is_staff", "is_superuser"])


@transaction.atomic
def staff_sign_in(*, issuer: str, claims: dict[str, Any]) -> User:
    """The user these verified ID token claims sign in as, with roles as their groups say.
    Raises SsoError when the user may not sign in."""
    identity = (
        StaffIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=str(claims["sub"]))
        .first()
    )
    if identity is None:
        identity = _link_or_create(issuer=issuer, claims=claims)
    if not identity.user.is_active:
        raise SsoError("Your Toolbay account is deactivated.")
    groups = _groups(claims)
    wanted = entitlements_for(groups, parse_role_map(settings.TOOLBAY_SSO_ROLE_MAP))
    _sync_memberships(identity, wanted)
    _sync_flags(identity, wanted)
    identity.groups = groups
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["groups", "granted_staff", "granted_superuser", "last_sign_in_at"])
    return identity.user
