"""``/api/v1/tenants/``: tenants, addressed by slug; only platform admins change them."""

from __future__ import annotations

from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins

from api.permissions import PLATFORM
from api.v1.serializers.tenants import TenantSerializer
from api.v1.views.base import ScopedViewSet
from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.selectors import tenants_in


@extend_schema_view(
    list=extend_schema(description="Platform admins see every tenant; others the tenants they are members of."),
    create=extend_schema(description="Platform admins only."),
    update=extend_schema(description="Platform admins only."),
    partial_update=extend_schema(description="Platform admins only."),
    destroy=extend_schema(description="Platform admins only. Deletes the tenant's keys, tools and rules too."),
)
class TenantViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    serializer_class = TenantSerializer
    lookup_field = "slug"
    action_roles = dict.fromkeys(("create", "update", "partial_update", "destroy"), PLATFORM)

    def object_tenant_id(self, obj: Model) -> int | None:
        assert isinstance(obj, Tenant)
        return obj.pk

    def get_queryset(self) -> QuerySet[Tenant]:
        return tenants_in(self.scope)

    def perform_destroy(self, instance: Tenant) -> None:
        tenant_services.tenant_delete(tenant=instance)
