"""``/api/v1/access-rules/``: who may see which tools, resources and prompts. Tenant admins manage the rules their
tenant owns (granting its private tools, denying anything for it); platform admins any rule."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from api.access import require_role
from api.v1.serializers.access_rules import AccessRuleSerializer
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_int, query_str
from tenants.scope import Role
from tools_app.catalog import services as tool_services
from tools_app.catalog.models import AccessRule
from tools_app.catalog.selectors import access_rules_in


@extend_schema_view(
    list=extend_schema(
        description="Platform admins see every rule; others the rules their tenants own.",
        parameters=[
            TENANT_PARAM,
            OpenApiParameter("tool", OpenApiTypes.INT, description="Only rules targeting this tool (id)."),
            OpenApiParameter("effect", OpenApiTypes.STR, enum=AccessRule.Effect.values, description="allow or deny"),
            OpenApiParameter(
                "kind", OpenApiTypes.STR, enum=AccessRule.Kind.values, description="What the rule's pattern matches."
            ),
        ],
    ),
    create=extend_schema(
        description="Admins and owners add rules owned by their tenant (they can grant its private tools, and "
        "deny anything for it); platform admins add any rule."
    ),
)
class AccessRuleViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    serializer_class = AccessRuleSerializer
    action_roles = WRITE_ROLES
    tenant_id_attr = "owner_id"  # a rule is its owner's to manage

    def get_queryset(self) -> QuerySet[AccessRule]:
        if self.action != "list":
            return access_rules_in(self.scope)
        return access_rules_in(
            self.scope,
            tenant_slug=query_str(self.request, "tenant"),
            tool_id=query_int(self.request, "tool"),
            effect=query_str(self.request, "effect"),
            kind=query_str(self.request, "kind"),
        )

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        owner = serializer.validated_data.get("owner")
        require_role(self.scope, owner.pk if owner is not None else None, Role.ADMIN)
        serializer.save()

    def perform_destroy(self, instance: AccessRule) -> None:
        tool_services.access_rule_delete(rule=instance)
