"""``/api/v1/resources/``, ``/api/v1/resource-templates/`` and ``/api/v1/prompts/``: the
platform catalog and tenants' private entries, with the admin's checks. Platform admins
see every one; others their tenants' private ones (another tenant's answer 404)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from api.access import require_role
from api.v1.serializers.resources import PromptSerializer, ResourceSerializer, ResourceTemplateSerializer
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_str
from tenants.scope import Role, TenantScope
from tools_app.catalog import services as catalog_services
from tools_app.catalog.selectors import prompts_in, resource_templates_in, resources_in


class _CatalogEntryViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    action_roles = WRITE_ROLES
    key = "name"  # the exact-match list filter
    selector: Callable[..., QuerySet[Any]]

    def get_queryset(self) -> QuerySet[Any]:
        select = type(self).selector
        if self.action != "list":
            return select(self.scope)
        return select(
            self.scope, tenant_slug=query_str(self.request, "tenant"), **{self.key: query_str(self.request, self.key)}
        )

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


def _resources(scope: TenantScope, **filters: Any) -> QuerySet[Any]:
    return resources_in(scope, **filters)


@_listing("resource", "uri")
class ResourceViewSet(_CatalogEntryViewSet):
    serializer_class = ResourceSerializer
    selector = staticmethod(_resources)
    key = "uri"


@_listing("resource template", "name")
class ResourceTemplateViewSet(_CatalogEntryViewSet):
    serializer_class = ResourceTemplateSerializer
    selector = staticmethod(resource_templates_in)


@_listing("prompt", "name")
class PromptViewSet(_CatalogEntryViewSet):
    serializer_class = PromptSerializer
    selector = staticmethod(prompts_in)
