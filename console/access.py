"""Who may read which audit rows in the console: the one place that scopes them.

Superusers see every tenant (and platform-wide change events, which belong to none).
Anyone else sees the tenants where they are an operator, admin or owner
(``tenants_operated_by``). A row, a tenant or a key outside that scope answers 404,
exactly like one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from audit.models import AuditEvent, Invocation
from tenants.models import ApiKey, Tenant
from tenants.selectors import tenants_operated_by

_SCOPE_ATTR = "_toolbay_console_scope"


@dataclass(frozen=True)
class ConsoleScope:
    platform: bool
    tenants: tuple[Tenant, ...]

    @property
    def tenant_ids(self) -> list[int]:
        return [tenant.pk for tenant in self.tenants]

    @property
    def is_empty(self) -> bool:
        return not self.platform and not self.tenants

    @cached_property
    def _slugs(self) -> dict[int, str]:
        return {tenant.pk: tenant.slug for tenant in self.tenants}

    def slug_of(self, tenant_id: int | None) -> str:
        return self._slugs.get(tenant_id, "") if tenant_id is not None else ""

    def invocations(self) -> QuerySet[Invocation]:
        rows = Invocation.objects.all()
        return rows if self.platform else rows.filter(tenant_id__in=self.tenant_ids)

    def audit_events(self) -> QuerySet[AuditEvent]:
        rows = AuditEvent.objects.all()
        return rows if self.platform else rows.filter(tenant_id__in=self.tenant_ids)

    def api_keys(self) -> QuerySet[ApiKey]:
        rows = ApiKey.objects.all()
        return rows if self.platform else rows.filter(tenant_id__in=self.tenant_ids)


def console_scope(request: HttpRequest) -> ConsoleScope:
    """The signed-in user's scope, computed once per request."""
    scope: ConsoleScope | None = getattr(request, _SCOPE_ATTR, None)
    if scope is None:
        user: Any = request.user
        if not user.is_authenticated or not user.is_active:
            scope = ConsoleScope(platform=False, tenants=())
        else:
            # Superusers see all tenants; listing them keeps slugs one query away.
            scope = ConsoleScope(platform=user.is_superuser, tenants=tuple(tenants_operated_by(user).order_by("slug")))
        setattr(request, _SCOPE_ATTR, scope)
    return scope


def access_tenant(scope: ConsoleScope, slug: str) -> Tenant:
    for tenant in scope.tenants:
        if tenant.slug == slug:
            return tenant
    raise Http404("No such tenant.")


def access_key(scope: ConsoleScope, key_id: int) -> ApiKey:
    key = scope.api_keys().filter(pk=key_id).first()
    if key is None:
        raise Http404("No such key.")
    return key


def access_invocation(scope: ConsoleScope, pk: int) -> Invocation:
    row = scope.invocations().filter(pk=pk).first()
    if row is None:
        raise Http404("No such invocation.")
    return row


def access_audit_event(scope: ConsoleScope, pk: int) -> AuditEvent:
    row = scope.audit_events().select_related("actor_user").filter(pk=pk).first()
    if row is None:
        raise Http404("No such change.")
    return row
