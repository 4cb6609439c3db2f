"""``/api/v1/tools/``: the platform catalog and tenants' private tools, with the admin's
checks; dry runs of a create or a change, and test calls through the real call path."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import require_role
from api.v1.serializers.tools import (
    TestCallRequestSerializer,
    TestCallResultSerializer,
    ToolCurationSerializer,
    ToolSerializer,
    ToolValidationSerializer,
    curation_view,
)
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, bool_param, query_bool, query_str
from tenants.scope import Role
from tools_app.catalog import services as catalog_services
from tools_app.catalog.models import Tool
from tools_app.catalog.selectors import entries_in
from tools_app.runs.trial_calls import tool_test_call

CATALOGS = {"platform": True, "private": False}  # ?catalog= → platform tools or not


@extend_schema_view(
    list=extend_schema(
        description="Platform admins see every tool; others their tenants' private tools.",
        parameters=[
            TENANT_PARAM,
            OpenApiParameter(
                "catalog", OpenApiTypes.STR, enum=["platform", "private"], description="Platform or private tools."
            ),
            OpenApiParameter("name", OpenApiTypes.STR, description="Only tools with this exact name."),
            bool_param("enabled", "Only enabled (true) or disabled tools."),
        ],
    ),
    create=extend_schema(description="Admins and owners add private tools; platform admins also platform tools."),
)
class ToolViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    serializer_class = ToolSerializer
    action_roles = {
        **WRITE_ROLES,
        "validate_new": Role.ADMIN,
        "validate_changes": Role.ADMIN,
        # A test call runs the tool for real, side effects included: for those who may change
        # it, as in the admin.
        "test_call": Role.ADMIN,
        # Changing what the model sees of a tool is changing the tool.
        "curation_replace": Role.ADMIN,
        "curation_update": Role.ADMIN,
        "curation_delete": Role.ADMIN,
    }

    def get_queryset(self) -> QuerySet[Tool]:
        if self.action != "list":
            return entries_in(Tool, self.scope)
        tenant_slug = query_str(self.request, "tenant")
        catalog = query_str(self.request, "catalog")
        if catalog is not None and catalog not in CATALOGS:
            raise ValidationError({"catalog": ["Use platform or private."]})
        return entries_in(
            Tool,
            self.scope,
            tenant_slug=tenant_slug,
            tenant__isnull=None if catalog is None else CATALOGS[catalog],
            name=query_str(self.request, "name"),
            enabled=query_bool(self.request, "enabled"),
        )

    def _require_write_role(self, serializer: serializers.BaseSerializer) -> None:
        tenant = serializer.validated_data.get("tenant")
        require_role(self.scope, tenant.pk if tenant is not None else None, Role.ADMIN)

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        self._require_write_role(serializer)
        serializer.save()

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        if not self.scope.platform:
            catalog_services.tool_check_platform_rules(tool=serializer.instance, changes=serializer.validated_data)
        serializer.save()

    def perform_destroy(self, instance: Tool) -> None:
        if not self.scope.platform:
            catalog_services.tool_check_platform_rules(tool=instance)
        catalog_services.catalog_entry_delete(entry=instance)

    def _dry_run(self, serializer: ToolSerializer) -> Response:
        tool = serializer.unsaved_entry()
        catalog_services.catalog_entry_check(tool)
        return Response(ToolValidationSerializer({"valid": True, "mcp": serializer.get_mcp(tool)}).data)

    @extend_schema(
        operation_id="tools_validate_new",
        request=ToolSerializer,
        responses=ToolValidationSerializer,
        description="Dry run of create: the same checks (schemas, backend, name), nothing is saved. "
        "An invalid tool answers 400 naming the fields, like create.",
    )
    @action(detail=False, methods=["post"], url_path="validate", url_name="validate")
    def validate_new(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self._require_write_role(serializer)
        return self._dry_run(serializer)

    @extend_schema(
        operation_id="tools_validate_changes",
        request=ToolSerializer(partial=True),
        responses=ToolValidationSerializer,
        description="Dry run of a partial update of this tool: the same checks, nothing is saved.",
    )
    @action(detail=True, methods=["post"], url_path="validate", url_name="validate-changes")
    def validate_changes(self, request: Request, pk: str | None = None) -> Response:
        serializer = self.get_serializer(self.get_object(), data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        if not self.scope.platform:
            catalog_services.tool_check_platform_rules(tool=serializer.instance, changes=serializer.validated_data)
        return self._dry_run(serializer)

    @extend_schema(
        request=TestCallRequestSerializer,
        responses=TestCallResultSerializer,
        description="Admins and owners (as in the admin: a test call has real side effects). Runs the tool "
        "once, through argument validation, its backend and the "
        "output checks, and answers what an MCP client would receive. Disabled tools can be tried too; "
        "elicitation and sampling are refused (there is no client to ask).",
    )
    @action(detail=True, methods=["post"], url_path="test-call", url_name="test-call")
    def test_call(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        body = TestCallRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        outcome = tool_test_call(tool=tool, arguments=body.validated_data["arguments"])
        data = {
            "result": outcome.result,
            "is_error": outcome.is_error,
            "notifications": outcome.notifications,
            "duration_ms": outcome.duration_ms,
        }
        return Response(TestCallResultSerializer(data).data, status=status.HTTP_200_OK)

    @extend_schema(
        operation_id="tools_curation_retrieve",
        responses=ToolCurationSerializer,
        description="What the model sees of this tool: the curation (overrides of name, title and description, "
        "argument rules), next to the tool's source definition and the published one.",
    )
    @action(detail=True, methods=["get"], url_path="curation", url_name="curation")
    def curation(self, request: Request, pk: str | None = None) -> Response:
        return Response(ToolCurationSerializer(curation_view(self.get_object())).data)

    def _curate(self, request: Request, *, partial: bool) -> Response:
        tool = self.get_object()
        body = ToolCurationSerializer(data=request.data, partial=partial)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
        if partial:
            current = curation_view(tool)
            fields = {name: fields.get(name, current[name]) for name in catalog_services.CURATION_FIELDS}
        catalog_services.tool_curate(tool=tool, fields=fields)
        return Response(ToolCurationSerializer(curation_view(tool)).data)

    @extend_schema(
        operation_id="tools_curation_replace",
        request=ToolCurationSerializer,
        responses=ToolCurationSerializer,
        description="Replace the curation (fields left out fall back to the source); an empty one removes it. "
        "Kept across re-imports and refreshes; audited; clients get list_changed.",
    )
    @curation.mapping.put
    def curation_replace(self, request: Request, pk: str | None = None) -> Response:
        return self._curate(request, partial=False)

    @extend_schema(
        operation_id="tools_curation_update",
        request=ToolCurationSerializer(partial=True),
        responses=ToolCurationSerializer,
        description="Change some fields of the curation; the others stay.",
    )
    @curation.mapping.patch
    def curation_update(self, request: Request, pk: str | None = None) -> Response:
        return self._curate(request, partial=True)

    @extend_schema(
        operation_id="tools_curation_delete",
        responses={204: None},
        description="Remove the curation: clients see the source definition again.",
    )
    @curation.mapping.delete
    def curation_delete(self, request: Request, pk: str | None = None) -> Response:
        catalog_services.tool_curation_delete(tool=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
