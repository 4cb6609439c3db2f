"""Who may do what through the REST API, read from the caller's ``TenantScope``
(``tenants.scope``), which comes from memberships alone.

- A superuser is a platform admin: every tenant, the platform catalog, platform rules.
- Anyone else acts in the active tenants where they hold a membership, with that role:
  viewers read; operators also read the invocation log and the change audit, and list and
  end MCP sessions; admins and owners also change the tenant's keys, memberships, private
  tools and the access rules the tenant owns, and run test calls; only owners hand out (or
  take away) the owner role.
- Django's ``is_staff`` and permission rows play no part, as in the admin.

Objects outside the scope are simply not in any selector's queryset, so they answer 404
exactly like missing ones; a role too low for a change to a visible object answers 403.
"""

from __future__ import annotations

from rest_framework.exceptions import PermissionDenied

from tenants.scope import TenantScope


def require_role(scope: TenantScope, tenant_id: int | None, minimum: str) -> None:
    """Raise PermissionDenied (403) unless the caller holds ``minimum`` in this tenant (None:
    the platform, for platform admins only)."""
    if scope.has_role(tenant_id, minimum):
        return
    if tenant_id is None:
        raise PermissionDenied("Only platform admins can manage platform objects.")
    raise PermissionDenied(f"This needs the {minimum} role or higher in the tenant.")
