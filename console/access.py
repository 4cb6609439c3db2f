"""Who may read which audit rows in the console: the one place that scopes them.

The console reads the request's ``TenantScope`` (``tenants.scope``) with its own rule:
superusers see every tenant (and platform-wide change events, which belong to none);
anyone else sees the tenants where they are an operator, admin or owner, active or not.
A row, a tenant or a key outside that scope answers 404, exactly like one that does not
exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db.models import Q, QuerySet
from django.http import Http404

from audit.models import AuditEvent, Invocation, QuarantinedInvocation
from tenants.models import ApiKey, Tenant
from tenants.scope import Role, TenantScope
from tenants.selectors import tenants_in

CONSOLE_ROLE = Role.OPERATOR


def operated_tenant_ids(scope: TenantScope) -> frozenset[int]:
    """The tenants the user operates (not meaningful for platform admins, who see all)."""
    return scope.tenant_ids(CONSOLE_ROLE, include_inactive=True)


def may_use_console(scope: TenantScope) -> bool:
    return scope.platform or bool(operated_tenant_ids(scope))


def operated_tenants(scope: TenantScope, slug: str | None = None) -> QuerySet[Tenant]:
    """Every tenant for superusers, else those the user operates; by slug."""
    return tenants_in(scope, CONSOLE_ROLE, include_inactive=True, slug=slug).order_by("slug")


def slug_finder(tenants: Iterable[Tenant]) -> Callable[[int | None], str]:
    """Tenant id → slug among ``tenants`` ("" for none): rows carry only the id."""
    slugs: dict[int | None, str] = {tenant.pk: tenant.slug for tenant in tenants}
    return lambda tenant_id: slugs.get(tenant_id, "")


def _operated(scope: TenantScope) -> Q:
    return scope.within("tenant", CONSOLE_ROLE, include_inactive=True)


def invocations(scope: TenantScope) -> QuerySet[Invocation]:
    return Invocation.objects.filter(_operated(scope))


def quarantined_invocations(scope: TenantScope) -> QuerySet[QuarantinedInvocation]:
    """Rows the audit writer could not store: a tenant's to its operators; those whose
    tenant could not be read, to superusers only."""
    rows = QuarantinedInvocation.objects.all()
    return rows if scope.platform else rows.filter(tenant_id__in=operated_tenant_ids(scope))


def audit_events(scope: TenantScope) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(_operated(scope))


def api_keys(scope: TenantScope) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(_operated(scope))


def access_tenant(scope: TenantScope, slug: str) -> Tenant:
    tenant = operated_tenants(scope, slug).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def access_key(scope: TenantScope, key_id: int) -> ApiKey:
    key = api_keys(scope).filter(pk=key_id).first()
    if key is None:
        raise Http404("No such key.")
    return key


def access_invocation(scope: TenantScope, pk: int) -> Invocation:
    row = invocations(scope).select_related("tenant").filter(pk=pk).first()
    if row is None:
        raise Http404("No such invocation.")
    return row


def access_audit_event(scope: TenantScope, pk: int) -> AuditEvent:
    row = audit_events(scope).select_related("actor_user").filter(pk=pk).first()
    if row is None:
        raise Http404("No such change.")
    return row
