"""Views of the v1 API: parse, check the role, call one service or selector, serialize.

Every queryset starts from the caller's tenants (``api.access``), so another tenant's
object answers 404 like a missing one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.db.models import Model, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.access import require_role
from api.pagination import AuditEventPagination, InvocationPagination
from api.permissions import PLATFORM, RolePermission
from api.selectors import access_tokens_of
from api.services import access_token_revoke
from api.v1 import serializers as s
from audit.models import AuditEvent, Invocation
from console.live_sessions import live_sessions_of, session_end
from tenants import services as tenant_services
from tenants.models import ApiKey, Membership, Tenant
from tenants.scope import Role, TenantScope, tenant_scope
from tenants.selectors import memberships_listed_for
from tools_app.catalog import services as tool_services
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.trial_calls import tool_test_call

# --- query parameters -------------------------------------------------------------------

TENANT_PARAM = OpenApiParameter("tenant", OpenApiTypes.STR, description="Only objects of the tenant with this slug.")


def _bool_param(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.BOOL, description=description)


def query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise ValidationError({name: ["Use true or false."]})


def query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise ValidationError({name: ["Use an id (a whole number)."]})
    return int(raw)


def query_str(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and "\x00" in raw:
        raise ValidationError({name: ["NUL characters are not allowed."]})
    return raw


# --- the base ---------------------------------------------------------------------------


class ScopedViewSet(viewsets.GenericViewSet):
    """``action_roles`` maps actions to the role they need (see ``RolePermission``); the
    others are reads. ``tenant_lookup`` is the path from an object to the tenant whose
    members see it."""

    permission_classes = [IsAuthenticated, RolePermission]
    action_roles: ClassVar[Mapping[str, str]] = {}
    tenant_lookup = "tenant"

    @property
    def scope(self) -> TenantScope:
        return tenant_scope(self.request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # No object's id or slug holds a NUL, and PostgreSQL refuses to even look one up.
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound()

    def required_role(self) -> str | None:
        return self.action_roles.get(self.action or "")

    def object_tenant_id(self, obj: Model) -> int | None:
        return getattr(obj, f"{self.tenant_lookup}_id")  # type: ignore[no-any-return]

    def scoped(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.scope.platform:
            return queryset
        return queryset.filter(**{f"{self.tenant_lookup}_id__in": self.scope.tenant_ids()})

    def filter_by_tenant(self, queryset: QuerySet[Any], field: str = "tenant") -> QuerySet[Any]:
        slug = query_str(self.request, "tenant")
        return queryset if slug is None else queryset.filter(**{f"{field}__slug": slug})


WRITE_ROLES = {
    "create": Role.ADMIN,
    "update": Role.ADMIN,
    "partial_update": Role.ADMIN,
    "destroy": Role.ADMIN,
}

# --- the caller -------------------------------------------------------------------------


class MeView(APIView):
    """Who the credential belongs to, and where they hold which role."""

    @extend_schema(responses=s.MeSerializer, operation_id="me_retrieve")
    def get(self, request: Request) -> Response:
        user = request.user
        memberships = [{"tenant": slug, "role": role} for slug, role in memberships_listed_for(user.pk)]
        data = {"username": user.get_username(), "is_superuser": user.is_superuser, "memberships": memberships}
        return Response(s.MeSerializer(data).data)


# --- tenants ----------------------------------------------------------------------------


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
    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    action_roles = dict.fromkeys(("create", "update", "partial_update", "destroy"), PLATFORM)
    tenant_lookup = "pk"

    def object_tenant_id(self, obj: Model) -> int | None:
        return obj.pk  # type: ignore[no-any-return]

    def get_queryset(self) -> QuerySet[Tenant]:
        tenants = Tenant.objects.all()
        return tenants if self.scope.platform else tenants.filter(pk__in=self.scope.tenant_ids())

    def perform_destroy(self, instance: Tenant) -> None:
        tenant_services.tenant_delete(tenant=instance)


# --- memberships ------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        parameters=[
            TENANT_PARAM,
            OpenApiParameter("user", OpenApiTypes.STR, description="Only this username's memberships."),
            OpenApiParameter("role", OpenApiTypes.STR, enum=Role.values, description="Only this role."),
        ]
    ),
    create=extend_schema(description="Admins and owners; only owners make owners."),
    update=extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipUpdateSerializer),
    partial_update=extend_schema(request=s.MembershipUpdateSerializer, responses=s.MembershipUpdateSerializer),
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
            return s.MembershipUpdateSerializer
        return s.MembershipSerializer

    def get_queryset(self) -> QuerySet[Membership]:
        memberships = self.scoped(Membership.objects.select_related("tenant", "user"))
        if self.action == "list":
            memberships = self.filter_by_tenant(memberships)
            if (username := query_str(self.request, "user")) is not None:
                memberships = memberships.filter(user__username=username)
            if (role := query_str(self.request, "role")) is not None:
                memberships = memberships.filter(role=role)
        return memberships

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


# --- MCP API keys -----------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(parameters=[TENANT_PARAM, _bool_param("revoked", "Only revoked (true) or unrevoked keys.")]),
    create=extend_schema(
        request=s.ApiKeySerializer,
        responses={201: s.ApiKeyCreatedSerializer},
        description="Admins and owners. The answer carries the raw key, once: it is stored only as a hash.",
    ),
    update=extend_schema(request=s.ApiKeyUpdateSerializer, responses=s.ApiKeySerializer),
    partial_update=extend_schema(request=s.ApiKeyUpdateSerializer, responses=s.ApiKeySerializer),
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
            return s.ApiKeyUpdateSerializer
        return s.ApiKeySerializer

    def get_queryset(self) -> QuerySet[ApiKey]:
        api_keys = self.scoped(ApiKey.objects.select_related("tenant", "created_by"))
        if self.action == "list":
            api_keys = self.filter_by_tenant(api_keys)
            revoked = query_bool(self.request, "revoked")
            if revoked is not None:
                api_keys = api_keys.filter(revoked_at__isnull=not revoked)
        return api_keys

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        require_role(self.scope, serializer.validated_data["tenant"].pk, Role.ADMIN)
        key = serializer.save()
        return Response(s.ApiKeyCreatedSerializer(key, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=None, responses=s.ApiKeySerializer, description="Admins and owners. Idempotent.")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        key = tenant_services.api_key_revoke(key=self.get_object())
        return Response(s.ApiKeySerializer(key, context=self.get_serializer_context()).data)


# --- personal access tokens -------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(description="Your own tokens."),
    create=extend_schema(
        responses={201: s.AccessTokenCreatedSerializer},
        description="A token for scripts, acting as you. The answer carries the raw token, once.",
    ),
)
class AccessTokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    ScopedViewSet,
):
    serializer_class = s.AccessTokenSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return access_tokens_of(self.request.user)

    def object_tenant_id(self, obj: Model) -> int | None:
        return None  # a user's own, in no tenant

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = serializer.save()
        return Response(s.AccessTokenCreatedSerializer(token, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=None, responses=s.AccessTokenSerializer, description="Idempotent.")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = access_token_revoke(token=self.get_object())
        return Response(s.AccessTokenSerializer(token).data)


# --- tools ------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        description="Platform admins see every tool; others their tenants' private tools.",
        parameters=[
            TENANT_PARAM,
            OpenApiParameter(
                "catalog", OpenApiTypes.STR, enum=["platform", "private"], description="Platform or private tools."
            ),
            OpenApiParameter("name", OpenApiTypes.STR, description="Only tools with this exact name."),
            _bool_param("enabled", "Only enabled (true) or disabled tools."),
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
    serializer_class = s.ToolSerializer
    action_roles = {
        **WRITE_ROLES,
        "validate_new": Role.ADMIN,
        "validate_changes": Role.ADMIN,
        # A test call runs the tool for real, side effects included: for those who may change
        # it, as in the admin.
        "test_call": Role.ADMIN,
    }

    def get_queryset(self) -> QuerySet[Tool]:
        tools = self.scoped(Tool.objects.select_related("tenant"))
        if self.action == "list":
            tools = self.filter_by_tenant(tools)
            catalog = query_str(self.request, "catalog")
            if catalog not in (None, "platform", "private"):
                raise ValidationError({"catalog": ["Use platform or private."]})
            if catalog is not None:
                tools = tools.filter(tenant__isnull=catalog == "platform")
            if (name := query_str(self.request, "name")) is not None:
                tools = tools.filter(name=name)
            if (enabled := query_bool(self.request, "enabled")) is not None:
                tools = tools.filter(enabled=enabled)
        return tools

    def _require_write_role(self, serializer: serializers.BaseSerializer) -> None:
        tenant = serializer.validated_data.get("tenant")
        require_role(self.scope, tenant.pk if tenant is not None else None, Role.ADMIN)

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        self._require_write_role(serializer)
        serializer.save()

    def perform_destroy(self, instance: Tool) -> None:
        tool_services.tool_delete(tool=instance)

    def _dry_run(self, serializer: s.ToolSerializer) -> Response:
        tool = serializer.unsaved_tool()
        tool_services.tool_check(tool)
        return Response(s.ToolValidationSerializer({"valid": True, "mcp": ToolSpec.from_model(tool).wire}).data)

    @extend_schema(
        operation_id="tools_validate_new",
        request=s.ToolSerializer,
        responses=s.ToolValidationSerializer,
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
        request=s.ToolSerializer(partial=True),
        responses=s.ToolValidationSerializer,
        description="Dry run of a partial update of this tool: the same checks, nothing is saved.",
    )
    @action(detail=True, methods=["post"], url_path="validate", url_name="validate-changes")
    def validate_changes(self, request: Request, pk: str | None = None) -> Response:
        serializer = self.get_serializer(self.get_object(), data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        return self._dry_run(serializer)

    @extend_schema(
        request=s.TestCallRequestSerializer,
        responses=s.TestCallResultSerializer,
        description="Admins and owners (as in the admin: a test call has real side effects). Runs the tool "
        "once, through argument validation, its backend and the "
        "output checks, and answers what an MCP client would receive. Disabled tools can be tried too; "
        "elicitation and sampling are refused (there is no client to ask).",
    )
    @action(detail=True, methods=["post"], url_path="test-call", url_name="test-call")
    def test_call(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        body = s.TestCallRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        outcome = tool_test_call(tool=tool, arguments=body.validated_data["arguments"])
        data = {
            "result": outcome.result,
            "is_error": outcome.is_error,
            "notifications": outcome.notifications,
            "duration_ms": outcome.duration_ms,
        }
        return Response(s.TestCallResultSerializer(data).data, status=status.HTTP_200_OK)


# --- access rules -----------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        description="Platform admins see every rule; others the rules their tenants own.",
        parameters=[
            TENANT_PARAM,
            OpenApiParameter("tool", OpenApiTypes.INT, description="Only rules targeting this tool (id)."),
            OpenApiParameter("effect", OpenApiTypes.STR, enum=AccessRule.Effect.values, description="allow or deny"),
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
    serializer_class = s.AccessRuleSerializer
    action_roles = WRITE_ROLES
    tenant_lookup = "owner"

    def get_queryset(self) -> QuerySet[AccessRule]:
        rules = AccessRule.objects.select_related("tool", "tenant", "owner", "created_by").prefetch_related("api_keys")
        rules = self.scoped(rules)
        if self.action == "list":
            rules = self.filter_by_tenant(rules)
            if (tool_id := query_int(self.request, "tool")) is not None:
                rules = rules.filter(tool_id=tool_id)
            if (effect := query_str(self.request, "effect")) is not None:
                rules = rules.filter(effect=effect)
        return rules

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        owner = serializer.validated_data.get("owner")
        require_role(self.scope, owner.pk if owner is not None else None, Role.ADMIN)
        serializer.save()

    def perform_destroy(self, instance: AccessRule) -> None:
        tool_services.access_rule_delete(rule=instance)


# --- MCP sessions -----------------------------------------------------------------------


class SessionViewSet(ScopedViewSet):
    """Open MCP sessions, as the operator console shows them. Operators and up."""

    pagination_class = None  # sessions live in Redis, listed whole like the console does
    action_roles = {"end": Role.OPERATOR}

    def operated_tenants(self) -> QuerySet[Tenant]:
        tenants = Tenant.objects.all()
        if not self.scope.platform:
            tenants = tenants.filter(pk__in=self.scope.tenant_ids(Role.OPERATOR))
        return tenants

    @extend_schema(
        parameters=[TENANT_PARAM],
        responses=s.SessionSerializer(many=True),
        description="Open sessions of the tenants where you are an operator or more, most recently seen first.",
    )
    def list(self, request: Request) -> Response:
        tenants = self.operated_tenants()
        if (slug := query_str(request, "tenant")) is not None:
            tenants = tenants.filter(slug=slug)
        rows = live_sessions_of(list(tenants))
        return Response(s.SessionSerializer(rows, many=True).data)

    @extend_schema(
        request=s.SessionEndSerializer,
        responses={204: None},
        description="End a session: the client's next request answers 404 and its notification stream closes.",
    )
    @action(detail=False, methods=["post"])
    def end(self, request: Request) -> Response:
        body = s.SessionEndSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        tenant = body.validated_data["tenant"]
        require_role(self.scope, tenant.pk, Role.OPERATOR)
        if not session_end(tenant=tenant, session_id=body.validated_data["session"]):
            raise NotFound("The tenant has no open session with this id.")
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- invocations and change audit (read-only) -------------------------------------------


class _AuditLogViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Read-only, for operators and up, as the operator console; append-only rows, so there is
    nothing to write. Platform-wide rows (no tenant) are for platform admins only."""

    filter_class: ClassVar[type[serializers.Serializer]]
    time_field = "created_at"

    def rows(self) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        rows = self.rows()
        if not self.scope.platform:
            rows = rows.filter(tenant_id__in=self.scope.tenant_ids(Role.OPERATOR))
        if self.action == "list":
            params = self.filter_class(data=self.request.query_params)
            params.is_valid(raise_exception=True)
            rows = self.apply_filters(rows, params.validated_data)
        return rows

    def apply_filters(self, rows: QuerySet[Any], data: dict[str, Any]) -> QuerySet[Any]:
        if "tenant" in data:
            rows = rows.filter(tenant_id__in=Tenant.objects.filter(slug=data["tenant"]).values("pk"))
        if "since" in data:
            rows = rows.filter(**{f"{self.time_field}__gte": data["since"]})
        if "until" in data:
            rows = rows.filter(**{f"{self.time_field}__lt": data["until"]})
        return rows


@extend_schema_view(
    list=extend_schema(
        parameters=[s.InvocationFilter],
        description="One row per tools/call (and MCP task), newest first. Operators and up see their tenants'.",
    )
)
class InvocationViewSet(_AuditLogViewSet):
    serializer_class = s.InvocationSerializer
    pagination_class = InvocationPagination
    filter_class = s.InvocationFilter
    time_field = "started_at"

    def rows(self) -> QuerySet[Invocation]:
        return Invocation.objects.select_related("tenant")

    def apply_filters(self, rows: QuerySet[Any], data: dict[str, Any]) -> QuerySet[Any]:
        rows = super().apply_filters(rows, data)
        fields = {"tool": "tool_name", "key": "key_id", "outcome": "outcome", "session": "session_id", "run": "run_id"}
        for param, field in fields.items():
            if param in data:
                rows = rows.filter(**{field: data[param]})
        return rows


@extend_schema_view(
    list=extend_schema(
        parameters=[s.AuditEventFilter],
        description="Who changed what, from where, with a field-level diff; newest first. Append-only.",
    )
)
class AuditEventViewSet(_AuditLogViewSet):
    serializer_class = s.AuditEventSerializer
    pagination_class = AuditEventPagination
    filter_class = s.AuditEventFilter

    def rows(self) -> QuerySet[AuditEvent]:
        return AuditEvent.objects.all()

    def apply_filters(self, rows: QuerySet[Any], data: dict[str, Any]) -> QuerySet[Any]:
        rows = super().apply_filters(rows, data)
        for param in ("object_type", "object_id", "action", "source"):
            if param in data:
                rows = rows.filter(**{param: data[param]})
        if "actor" in data:
            rows = rows.filter(actor_label__icontains=data["actor"])
        return rows
