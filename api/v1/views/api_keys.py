"""``/api/v1/api-keys/``: the MCP API keys of a tenant's clients; admins and owners create,
rename, rescope and revoke them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import require_role
from api.v1.serializers.api_keys import ApiKeyCreatedSerializer, ApiKeySerializer, ApiKeyUpdateSerializer
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, bool_param, query_bool, query_str
from tenants import services as tenant_services
from tenants.models import ApiKey
from tenants.scope import Role
from tenants.selectors import api_keys_in


@extend_schema_view(
    list=extend_schema(parameters=[TENANT_PARAM, bool_param("revoked", "Only revoked (true) or unrevoked keys.")]),
    create=extend_schema(
        request=ApiKeySerializer,
        responses={201: ApiKeyCreatedSerializer},
        description="Admins and owners. The answer carries the raw key, once: it is stored only as a hash.",
    ),
    update=extend_schema(request=ApiKeyUpdateSerializer, responses=ApiKeySerializer),
    partial_update=extend_schema(request=ApiKeyUpdateSerializer, responses=ApiKeySerializer),
)
class ApiKeyViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    ScopedViewSet,
):
    action_roles = {**WRITE_ROLES, "revoke": Role.ADMIN}

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action in ("update", "partial_update"):
            return ApiKeyUpdateSerializer
        return ApiKeySerializer

    def get_queryset(self) -> QuerySet[ApiKey]:
        if self.action != "list":
            return api_keys_in(self.scope)
        return api_keys_in(
            self.scope, tenant_slug=query_str(self.request, "tenant"), revoked=query_bool(self.request, "revoked")
        )

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        require_role(self.scope, serializer.validated_data["tenant"].pk, Role.ADMIN)
        key = serializer.save()
        return Response(ApiKeyCreatedSerializer(key, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=None, responses=ApiKeySerializer, description="Admins and owners. Idempotent.")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        key = tenant_services.api_key_revoke(key=self.get_object())
        return Response(ApiKeySerializer(key, context=self.get_serializer_context()).data)
