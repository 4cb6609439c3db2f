"""The group → role map of staff SSO (``TOOLBAY_SSO_ROLE_MAP``) and what a set of groups grants.

The map is JSON: each group names one grant or a list of them, ``"platform-admin"`` or
``"<tenant-slug>:<role>"`` with a role of ``tenants.models.Membership.Role``::

    {"toolbay-admins": "platform-admin", "acme-ops": ["acme:operator", "beta:viewer"]}

A user in several groups gets, per tenant, the highest role any of them grants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from tenants.models import Membership
from tenants.scope import role_rank

PLATFORM_ADMIN = "platform-admin"
ROLES = frozenset(Membership.Role.values)


@dataclass(frozen=True)
class Entitlements:
    platform_admin: bool = False
    tenant_roles: Mapping[str, str] = field(default_factory=dict)  # tenant slug → role


RoleMap = dict[str, tuple[str, ...]]


def parse_role_map(raw: Any) -> RoleMap:
    """The map, checked; raises ImproperlyConfigured naming the bad entry."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured("TOOLBAY_SSO_ROLE_MAP must be a JSON object of group → grant(s)")
    parsed: RoleMap = {}
    for group, grants in raw.items():
        items = [grants] if isinstance(grants, str) else grants
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise ImproperlyConfigured(f"TOOLBAY_SSO_ROLE_MAP[{group!r}] must be a grant or a list of grants")
        for item in items:
            if item == PLATFORM_ADMIN:
                continue
            slug, _, role = item.partition(":")
            if not slug or role not in ROLES:
                raise ImproperlyConfigured(
                    f"TOOLBAY_SSO_ROLE_MAP[{group!r}]: {item!r} is neither {PLATFORM_ADMIN!r} nor "
                    f"'<tenant-slug>:<role>' with a role among {', '.join(sorted(ROLES))}"
                )
        parsed[str(group)] = tuple(items)
    return parsed


def entitlements_for(groups: Iterable[str], role_map: RoleMap) -> Entitlements:
    platform_admin = False
    tenant_roles: dict[str, str] = {}
    for group in groups:
        for grant in role_map.get(group, ()):
            if grant == PLATFORM_ADMIN:
                platform_admin = True
                continue
            slug, _, role = grant.partition(":")
            if slug not in tenant_roles or role_rank(role) > role_rank(tenant_roles[slug]):
                tenant_roles[slug] = role
    return Entitlements(platform_admin=platform_admin, tenant_roles=tenant_roles)
