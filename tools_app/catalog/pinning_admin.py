"""Admin screen of pending definitions: what imported tools' sources offer and waits for
approval, side by side with the pinned definition, approved or rejected by an action that
goes through ``tools_app.catalog.pinning``. Scoped like every tenant object."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tenants.admin import TenantScopedAdmin
from tools_app.catalog.models import PendingDefinition
from tools_app.catalog.pinning import DefinitionDecisionRefused, pending_definition_decide, shown

CELL_STYLE = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; "
    "margin: 0; max-width: 40em; overflow-x: auto;"
)


@admin.register(PendingDefinition)
class PendingDefinitionAdmin(TenantScopedAdmin):
    list_display = ("tool", "scope", "source", "changed_fields", "status", "created_at", "decided_by")
    list_filter = ("status", "source_kind")
    list_select_related = ("tool", "tenant", "decided_by")
    search_fields = ("tool__name", "source_name")
    actions = ("approve_selected", "reject_selected")
    fields = ("tool", "source", "status", "created_at", "decided_at", "decided_by", "note", "side_by_side")
    readonly_fields = fields

    @admin.display(description="Tools for", ordering="tenant__slug")
    def scope(self, obj: PendingDefinition) -> str:
        return "platform" if obj.tenant_id is None else str(obj.tenant)

    @admin.display(description="Source")
    def source(self, obj: PendingDefinition) -> str:
        return f"{obj.get_source_kind_display()} {obj.source_name}"

    @admin.display(description="Changed")
    def changed_fields(self, obj: PendingDefinition) -> str:
        return ", ".join(sorted(obj.diff))

    @admin.display(description="Pinned and proposed")
    def side_by_side(self, obj: PendingDefinition) -> SafeString:
        rows = format_html_join(
            "",
            '<tr><th>{}</th><td><pre style="{}">{}</pre></td><td><pre style="{}">{}</pre></td></tr>',
            (
                (name, CELL_STYLE, shown(pinned), CELL_STYLE, shown(proposed))
                for name, (pinned, proposed) in sorted(obj.diff.items())
            ),
        )
        header = "<tr><th>Field</th><th>Pinned (clients see)</th><th>Proposed</th></tr>"
        return format_html("<table>{}{}</table>", SafeString(header), rows)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sources propose; nobody types a proposal

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # decided by the actions, never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of what was decided stays

    def _decide(self, request: HttpRequest, queryset: QuerySet[PendingDefinition], *, approve: bool) -> None:
        done = 0
        skipped = queryset.exclude(status=PendingDefinition.Status.PENDING).count()
        for pending in queryset.filter(status=PendingDefinition.Status.PENDING):
            try:
                pending_definition_decide(pending_id=pending.pk, approve=approve, user=request.user)
            except DefinitionDecisionRefused as exc:
                self.message_user(request, str(exc), messages.WARNING)
                continue
            except ValidationError as exc:
                self.message_user(request, f"{pending.tool}: {'; '.join(exc.messages)}", messages.ERROR)
                continue
            done += 1
        verb = "Approved" if approve else "Rejected"
        note = f" ({skipped} were decided already)" if skipped else ""
        self.message_user(request, f"{verb} {done} definitions{note}.", messages.SUCCESS if done else messages.INFO)

    @admin.action(description="Approve: clients see the proposed definitions")
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[PendingDefinition]) -> None:
        self._decide(request, queryset, approve=True)

    @admin.action(description="Reject: the tools keep their pinned definitions")
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[PendingDefinition]) -> None:
        self._decide(request, queryset, approve=False)
