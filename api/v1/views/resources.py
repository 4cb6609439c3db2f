"""``/api/v1/resources/``, ``/api/v1/resource-templates/`` and ``/api/v1/prompts/``: the
platform catalog and tenants' private entries, with the admin's checks. Platform admins
see every one; others their tenants' private ones (another tenant's answer 404)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from api.access import require_role
from api.v1.serializers.resources import PromptSerializer, ResourceSerializer, ResourceTemplateSerializer
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_str
from tenants.scope import Role
from tools_app.catalog import services as catalog_services
from tools_app.catalog.models import CatalogEntry, Prompt, Resource, ResourceTemplate
from tools_app.catalog.selectors import entries_in


class _CatalogEntryViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    action_roles = WRITE_ROLES
    model: type[CatalogEntry]
    key = "name"  # the exact-match list filter

    def get_queryset(self) -> QuerySet[Any]:
        if self.action != "list":
            return entries_in(self.model, self.scope)
        filters = {"tenant_slug": query_str(self.request, "tenant"), self.key: query_str(self.request, self.key)}
        return entries_in(self.model, self.scope, **filters)

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        tenant = serializer.validated_data.get("tenant")
        require_role(self.scope, tenant.pk if tenant is not None else None, Role.ADMIN)
        serializer.save()

    def perform_destroy(self, instance: Any) -> None:
        catalog_services.catalog_entry_delete(entry=instance)


def _listing(what: str, key: str) -> Any:
    return extend_schema_view(
        list=extend_schema(
            description=f"Platform admins see every {what}; others their tenants' private ones.",
            parameters=[TENANT_PARAM, OpenApiParameter(key, OpenApiTypes.STR, description=f"Only this exact {key}.")],
        ),
        create=extend_schema(description=f"Admins and owners add private {what}s; platform admins platform ones too."),
    )


@_listing("resource", "uri")
class ResourceViewSet(_CatalogEntryViewSet):
    serializer_class = ResourceSerializer
    model = Resource
    key = "uri"


@_listing("resource template", "name")
class ResourceTemplateViewSet(_CatalogEntryViewSet):
    serializer_class = ResourceTemplateSerializer
    model = ResourceTemplate


@_listing("prompt", "name")
class PromptViewSet(_CatalogEntryViewSet):
    serializer_class = PromptSerializer
    model = Prompt
