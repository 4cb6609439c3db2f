"""Read-only admin screens for the audit log.

Nobody, superusers included, may add, change or delete an Invocation or an AuditEvent
here: the permissions say no for everyone, so Django offers no form, no delete button
and no bulk delete action, and answers 403 to a forged POST. Superusers see every row;
other staff see the rows of the tenants they operate (operator, admin or owner), and a
row of another tenant answers 404 like a missing one (who operates what: the request's
``TenantScope``). The operator console (/console/) is the richer view of the same data.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from audit.models import AuditEvent, Invocation, QuarantinedInvocation
from tenants.scope import Role, tenant_scope


def _operated_tenant_ids(request: HttpRequest) -> frozenset[int] | None:
    """None for superusers (everything), else the ids of the tenants the user operates
    (operator, admin or owner), active or not, as in the console."""
    scope = tenant_scope(request)
    if scope.platform:
        return None
    return scope.tenant_ids(Role.OPERATOR, include_inactive=True)


class ReadOnlyAuditAdmin(admin.ModelAdmin[Any]):
    actions = None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        ids = _operated_tenant_ids(request)
        return queryset if ids is None else queryset.filter(tenant_id__in=ids)

    def has_module_permission(self, request: HttpRequest) -> bool:
        ids = _operated_tenant_ids(request)
        return ids is None or bool(ids)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        ids = _operated_tenant_ids(request)
        if ids is None:
            return True
        return bool(ids) and (obj is None or getattr(obj, "tenant_id", None) in ids)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django's default for an object outside get_queryset() is a redirect with a
        # "doesn't exist" message; missing and forbidden answer the same 404 here.
        if self.get_object(request, unquote(object_id)) is None:
            raise Http404(f"No {self.opts.verbose_name} with this id.")
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(Invocation)
class InvocationAdmin(ReadOnlyAuditAdmin):
    list_display = ("started_at", "tenant", "tool_name", "outcome", "duration_ms", "key_label", "session_id")
    list_filter = ("outcome", "is_task")
    search_fields = ("tool_name", "run_id", "session_id")
    list_select_related = ("tenant",)
    date_hierarchy = None
    show_full_result_count = False  # COUNT(*) over millions of rows on every page is the slow part
    ordering = ("-started_at", "-id")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAuditAdmin):
    list_display = ("created_at", "tenant_slug", "actor_label", "source", "action", "object_type", "object_repr")
    list_filter = ("source", "action", "object_type")
    search_fields = ("object_repr", "object_id", "actor_label")
    show_full_result_count = False
    ordering = ("-created_at", "-id")


@admin.register(QuarantinedInvocation)
class QuarantinedInvocationAdmin(admin.ModelAdmin[QuarantinedInvocation]):
    """Invocation rows the database refused, for platform admins: the payload says whose they are."""

    list_display = ("created_at", "journal_id", "error")
    search_fields = ("journal_id", "payload", "error")
    readonly_fields = ("journal_id", "payload", "error", "created_at")
    actions = None

    def has_module_permission(self, request: HttpRequest) -> bool:
        return tenant_scope(request).platform

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
