"""``/api/v1/invocations/`` and ``/api/v1/audit-events/``: the invocation log and the change
audit, read-only, for operators and up, as in the operator console."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from api.pagination import AuditEventPagination, InvocationPagination
from api.v1.serializers.audit_log import AuditEventFilter, AuditEventSerializer, InvocationFilter, InvocationSerializer
from api.v1.views.base import ScopedViewSet
from audit.models import AuditEvent, Invocation
from audit.selectors import audit_events_in, invocations_in


class _AuditLogViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Read-only, for operators and up, as the operator console; append-only rows, so there is
    nothing to write. Platform-wide rows (no tenant) are for platform admins only."""

    # (The docstring above is the retrieve operations' description in the OpenAPI schema.)
    # A list reads its filters with filter_class (a bad one answers 400 naming it); rows()
    # hands them to the selector.
    filter_class: ClassVar[type[serializers.Serializer]]

    def rows(self, filters: dict[str, Any]) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        if self.action != "list":
            return self.rows({})
        params = self.filter_class(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        return self.rows(params.validated_data)


@extend_schema_view(
    list=extend_schema(
        parameters=[InvocationFilter],
        description="One row per tools/call (and MCP task), resources/read and prompts/get, newest first. "
        "Operators and up see their tenants'.",
    )
)
class InvocationViewSet(_AuditLogViewSet):
    serializer_class = InvocationSerializer
    pagination_class = InvocationPagination
    filter_class = InvocationFilter

    def rows(self, filters: dict[str, Any]) -> QuerySet[Invocation]:
        return invocations_in(
            self.scope,
            tenant_slug=filters.get("tenant"),
            since=filters.get("since"),
            until=filters.get("until"),
            tool_name=filters.get("tool"),
            key_id=filters.get("key"),
            outcome=filters.get("outcome"),
            session_id=filters.get("session"),
            run_id=filters.get("run"),
            kind=filters.get("kind"),
            protocol_version=filters.get("revision"),
            oauth_subject=filters.get("oauth_subject"),
            oauth_client=filters.get("oauth_client"),
            confirmation=filters.get("confirmation"),
        )


@extend_schema_view(
    list=extend_schema(
        parameters=[AuditEventFilter],
        description="Who changed what, from where, with a field-level diff; newest first. Append-only.",
    )
)
class AuditEventViewSet(_AuditLogViewSet):
    serializer_class = AuditEventSerializer
    pagination_class = AuditEventPagination
    filter_class = AuditEventFilter

    def rows(self, filters: dict[str, Any]) -> QuerySet[AuditEvent]:
        return audit_events_in(
            self.scope,
            tenant_slug=filters.get("tenant"),
            since=filters.get("since"),
            until=filters.get("until"),
            object_type=filters.get("object_type"),
            object_id=filters.get("object_id"),
            action=filters.get("action"),
            source=filters.get("source"),
            actor=filters.get("actor"),
            oauth_subject=filters.get("oauth_subject"),
            oauth_client=filters.get("oauth_client"),
        )
