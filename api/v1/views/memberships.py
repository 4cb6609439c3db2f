"""``/api/v1/memberships/``: who holds which role in which tenant; admins and owners change
them, and only owners touch the owner role."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from api.access import require_role
from api.v1.serializers.memberships import MembershipSerializer, MembershipUpdateSerializer
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_str
from tenants import services as tenant_services
from tenants.models import Membership
from tenants.scope import Role
from tenants.selectors import memberships_in


@extend_schema_view(
    list=extend_schema(
        parameters=[
            TENANT_PARAM,
            OpenApiParameter("user", OpenApiTypes.STR, description="Only this username's memberships."),
            OpenApiParameter("role", OpenApiTypes.STR, enum=Role.values, description="Only this role."),
        ]
    ),
    create=extend_schema(description="Admins and owners; only owners make owners."),
    update=extend_schema(request=MembershipUpdateSerializer, responses=MembershipUpdateSerializer),
    partial_update=extend_schema(request=MembershipUpdateSerializer, responses=MembershipUpdateSerializer),
    destroy=extend_schema(description="Admins and owners; only owners remove owners, and never the last one."),
)
class MembershipViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    action_roles = WRITE_ROLES

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        if self.action in ("update", "partial_update"):
            return MembershipUpdateSerializer
        return MembershipSerializer

    def get_queryset(self) -> QuerySet[Membership]:
        if self.action != "list":
            return memberships_in(self.scope)
        return memberships_in(
            self.scope,
            tenant_slug=query_str(self.request, "tenant"),
            username=query_str(self.request, "user"),
            role=query_str(self.request, "role"),
        )

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        data = serializer.validated_data
        require_role(self.scope, data["tenant"].pk, Role.OWNER if data["role"] == Role.OWNER else Role.ADMIN)
        serializer.save()

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        membership = serializer.instance
        if membership.role == Role.OWNER or serializer.validated_data.get("role") == Role.OWNER:
            require_role(self.scope, membership.tenant_id, Role.OWNER)
        serializer.save()

    def perform_destroy(self, instance: Membership) -> None:
        if instance.role == Role.OWNER:
            require_role(self.scope, instance.tenant_id, Role.OWNER)
        tenant_services.membership_remove(membership=instance)
