"""``/api/v1/pending-definitions/``: definitions imported tools' sources offered, waiting for
approval (pinned definitions); admins and owners of the tool's tenant approve or reject."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api.exceptions import Conflict
from api.pagination import NewestFirstPagination
from api.v1.serializers.pending_definitions import PendingDefinitionFilter, PendingDefinitionSerializer
from api.v1.views.base import ScopedViewSet
from tenants.scope import Role
from tools_app.catalog.models import PendingDefinition
from tools_app.catalog.pinning import DefinitionDecisionRefused, pending_definition_decide, pending_definitions_in

DECISION = (
    "Admins and owners of the tool's tenant (platform admins for platform tools). Answers the decided "
    "proposal; one that was decided already (another admin was quicker) answers 409 saying by whom."
)


@extend_schema_view(
    list=extend_schema(
        parameters=[PendingDefinitionFilter],
        description="Proposals of the tenants you belong to, newest first: what a refresh of an upstream MCP "
        "server or a re-import of an OpenAPI document would change of a tool (diff: pinned and proposed "
        "value per field). Clients see the pinned definition until a proposal is approved.",
    ),
    retrieve=extend_schema(description="One proposal with its diff."),
)
class PendingDefinitionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    serializer_class = PendingDefinitionSerializer
    pagination_class = NewestFirstPagination
    action_roles = {"approve": Role.ADMIN, "reject": Role.ADMIN}

    def get_queryset(self) -> QuerySet[PendingDefinition]:
        rows = pending_definitions_in(self.scope)
        if self.action != "list":
            return rows
        params = PendingDefinitionFilter(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        filters = params.validated_data
        if "tenant" in filters:
            rows = rows.filter(tenant__slug=filters["tenant"])
        if "status" in filters:
            rows = rows.filter(status=filters["status"])
        if "tool" in filters:
            rows = rows.filter(tool__name=filters["tool"])
        return rows

    def _decide(self, *, approve: bool) -> Response:
        pending = self.get_object()  # 404 outside the scope; 403 below the admin role
        try:
            decided = pending_definition_decide(pending_id=pending.pk, approve=approve, user=self.request.user)
        except DefinitionDecisionRefused as exc:
            raise Conflict(str(exc)) from None
        return Response(PendingDefinitionSerializer(decided).data)

    @extend_schema(request=None, responses=PendingDefinitionSerializer, description=f"Approve: {DECISION}")
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(approve=True)

    @extend_schema(request=None, responses=PendingDefinitionSerializer, description=f"Reject: {DECISION}")
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(approve=False)
