"""``POST /api/v1/openapi-imports/``: preview (dry_run) or run an OpenAPI import."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import require_role
from api.v1.serializers.openapi_imports import OpenApiImportRequestSerializer, OpenApiImportResultSerializer
from api.v1.views.base import ScopedViewSet
from tenants.scope import Role
from tools_app.imports.openapi.operations import Selection
from tools_app.imports.openapi.services import (
    DocumentProblem,
    ImportOptions,
    OptionProblem,
    SecurityOptions,
    openapi_import,
    openapi_preview,
    read_source,
)


class OpenApiImportViewSet(ScopedViewSet):
    serializer_class = OpenApiImportRequestSerializer

    @extend_schema(
        request=OpenApiImportRequestSerializer,
        responses={200: OpenApiImportResultSerializer, 201: OpenApiImportResultSerializer},
        description="Admins and owners of the tenant (platform admins for platform tools). One http tool per "
        "operation of an OpenAPI 3.0/3.1 or Swagger 2.0 document; dry_run previews what would be created, "
        "updated, parked for approval and skipped (approve: changed definitions are updated instead of "
        "parked). A document that cannot be used answers 400 naming the place.",
    )
    def create(self, request: Request) -> Response:
        body = OpenApiImportRequestSerializer(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        tenant = data.get("tenant")
        require_role(self.scope, tenant.pk if tenant is not None else None, Role.ADMIN)
        options = ImportOptions(
            prefix=data["prefix"],
            base_url=data["base_url"],
            selection=Selection(operation_ids=data["include"], tags=data["openapi_tags"], paths=data["paths"]),
            tags=data["labels"],
            name=data["name"],
            approve=data["approve"],
            security=SecurityOptions(connection_provider=data["connection_provider"], client_id=data["client_id"]),
        )
        try:
            source = read_source(text=data.get("document"), url=data.get("url", ""))
            if data["dry_run"]:
                plan = openapi_preview(source=source, tenant=tenant, options=options)
            else:
                plan = openapi_import(source=source, tenant=tenant, options=options, grant=data["grant"])
        except DocumentProblem as exc:
            raise ValidationError({"document": [str(exc)]}) from None
        except OptionProblem as exc:
            raise ValidationError({exc.option: [str(exc)]}) from None
        result = {
            "source": plan.source_name,
            "sha256": plan.sha256,
            "version": plan.version,
            "base_url": plan.base_url,
            "dry_run": data["dry_run"],
            "document_changed": plan.document_changed,
            "tools": [
                {"action": p.action, "name": p.draft.name, "operation": p.draft.operation, "changes": p.changes}
                for p in plan.tools
            ],
            "skipped": [{"operation": s.operation, "reason": s.reason} for s in plan.skipped],
            "notes": plan.notes,
            "missing": plan.missing,
        }
        code = status.HTTP_200_OK if data["dry_run"] else status.HTTP_201_CREATED
        return Response(OpenApiImportResultSerializer(result).data, status=code)
