"""Who may do what through the REST API: the caller's scope, from memberships alone.

- A superuser is a platform admin: every tenant, the platform catalog, platform rules.
- Anyone else acts in the active tenants where they hold a membership, with that role:
  viewers read; operators also list and end MCP sessions; admins and owners also change
  the tenant's keys, memberships, private tools and the access rules the tenant owns, and
  run test calls; only owners hand out (or take away) the owner role.
- Django's ``is_staff`` and permission rows play no part, as in the admin.

Objects outside the scope are simply not in any queryset, so they answer 404 exactly like
missing ones; a role too low for a change to a visible object answers 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request

from tenants.models import Membership
from tenants.selectors import membership_roles_of

Role = Membership.Role

# Each role can do everything the ones before it can.
ROLE_ORDER: tuple[str, ...] = (Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.OWNER)

_SCOPE_ATTR = "_toolbay_api_scope"


def role_rank(role: str) -> int:
    return ROLE_ORDER.index(role)


@dataclass(frozen=True)
class CallerScope:
    platform: bool
    roles: dict[int, str]

    def tenant_ids(self, minimum: str = Role.VIEWER) -> frozenset[int]:
        """Tenants where the caller holds at least ``minimum`` (not meaningful for platform callers)."""
        rank = role_rank(minimum)
        return frozenset(tenant_id for tenant_id, role in self.roles.items() if role_rank(role) >= rank)

    def has_role(self, tenant_id: int | None, minimum: str) -> bool:
        """Whether the caller may act with ``minimum`` in this tenant (None: the platform)."""
        if self.platform:
            return True
        if tenant_id is None:
            return False
        role = self.roles.get(tenant_id)
        return role is not None and role_rank(role) >= role_rank(minimum)

    def require_role(self, tenant_id: int | None, minimum: str) -> None:
        """Raise PermissionDenied (403) unless ``has_role``."""
        if self.has_role(tenant_id, minimum):
            return
        if tenant_id is None:
            raise PermissionDenied("Only platform admins can manage platform objects.")
        raise PermissionDenied(f"This needs the {minimum} role or higher in the tenant.")


def caller_scope(request: Request | Any) -> CallerScope:
    """The scope of the request's user, computed once per request."""
    scope: CallerScope | None = getattr(request, _SCOPE_ATTR, None)
    if scope is None:
        user = request.user
        if not user.is_authenticated or not user.is_active:
            scope = CallerScope(platform=False, roles={})
        elif user.is_superuser:
            scope = CallerScope(platform=True, roles={})
        else:
            scope = CallerScope(platform=False, roles=membership_roles_of(user.pk))
        setattr(request, _SCOPE_ATTR, scope)
    return scope
