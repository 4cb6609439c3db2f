"""Which tenants the signed-in user may act in, and with which role: one ``TenantScope``
per request, shared by the admin, the REST API and the operator console.

The scope is facts, not policy: whether the user is a platform admin (an active
superuser), whether they may use the Django admin at all (active staff), and their role in
each tenant where they hold a membership. Each surface reads its own rule from it:

- the REST API: roles in active tenants (``tenant_ids``, ``has_role``);
- the admin: staff users' admin and owner roles, in active and inactive tenants alike;
- the console: operator roles and up, in active and inactive tenants alike.

What "no" sounds like (DRF's 403, Django's 404) is up to the surface that says it, so this
module knows nothing of DRF or of the console. Reads that start from a scope are selectors
(``tenants.selectors.tenants_in``, ``tools_app.catalog.selectors.entries_in``, …); the one
read the scope itself needs, the user's memberships, is here, so that selectors can take a
scope without the two modules importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.db.models import Q

from tenants.models import Membership

Role = Membership.Role

# Each role can do everything the ones before it can.
ROLE_ORDER: tuple[str, ...] = (Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.OWNER)

_REQUEST_ATTR = "_toolbay_tenant_scope"


def role_rank(role: str) -> int:
    return ROLE_ORDER.index(role)


@dataclass(frozen=True)
class TenantScope:
    """``roles`` maps each active tenant where the user is a member to their role there;
    ``inactive_roles`` does the same for tenants that are switched off. Both are empty for
    platform admins, who need no membership anywhere."""

    platform: bool = False
    staff: bool = False
    roles: Mapping[int, str] = field(default_factory=dict)
    inactive_roles: Mapping[int, str] = field(default_factory=dict)

    def _roles(self, include_inactive: bool) -> Mapping[int, str]:
        return {**self.roles, **self.inactive_roles} if include_inactive else self.roles

    def tenant_ids(self, minimum: str = Role.VIEWER, *, include_inactive: bool = False) -> frozenset[int]:
        """Tenants where the user holds at least ``minimum`` (not meaningful for platform admins,
        who act in every tenant)."""
        rank = role_rank(minimum)
        roles = self._roles(include_inactive)
        return frozenset(tenant_id for tenant_id, role in roles.items() if role_rank(role) >= rank)

    def has_role(self, tenant_id: int | None, minimum: str, *, include_inactive: bool = False) -> bool:
        """Whether the user may act with ``minimum`` in this tenant (None: the platform itself,
        which only platform admins act in)."""
        if self.platform:
            return True
        if tenant_id is None:
            return False
        role = self._roles(include_inactive).get(tenant_id)
        return role is not None and role_rank(role) >= role_rank(minimum)

    def within(self, tenant_field: str, minimum: str = Role.VIEWER, *, include_inactive: bool = False) -> Q:
        """A filter keeping the rows whose ``tenant_field`` is a tenant where the user holds at
        least ``minimum``: every row for platform admins, none with a null tenant for others."""
        if self.platform:
            return Q()
        return Q(**{f"{tenant_field}__in": self.tenant_ids(minimum, include_inactive=include_inactive)})


class _RequestWithUser(Protocol):
    """A Django ``HttpRequest`` or a DRF ``Request``: all the scope needs is the user."""

    @property
    def user(self) -> Any: ...


def tenant_scope(request: _RequestWithUser) -> TenantScope:
    """The scope of the request's user, computed once per request (one query for anyone but
    a platform admin) and kept on the request.

    Anonymous and inactive users get an empty scope. Call it only once the request's user
    is known: for the REST API, after DRF has authenticated the request.
    """
    scope: TenantScope | None = getattr(request, _REQUEST_ATTR, None)
    if scope is None:
        scope = _scope_of_user(request.user)
        setattr(request, _REQUEST_ATTR, scope)
    return scope


def _scope_of_user(user: Any) -> TenantScope:
    if not user.is_authenticated or not user.is_active:
        return TenantScope()
    if user.is_superuser:
        return TenantScope(platform=True, staff=user.is_staff)
    roles: dict[int, str] = {}
    inactive_roles: dict[int, str] = {}
    memberships = Membership.objects.filter(user_id=user.pk).values_list("tenant_id", "role", "tenant__is_active")
    for tenant_id, role, tenant_is_active in memberships:
        (roles if tenant_is_active else inactive_roles)[tenant_id] = role
    return TenantScope(platform=False, staff=user.is_staff, roles=roles, inactive_roles=inactive_roles)
