"""Serializers of the v1 API: they check the shape of input and call services to write.

Domain rules (schemas, backends, names, owners) live in the services, which raise
Django's ValidationError per field; ``api.exceptions`` answers those like serializer
errors, so every 400 names its fields the same way.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.models import PersonalAccessToken
from api.services import access_token_create
from audit.models import AuditEvent, Invocation
from tenants import services as tenant_services
from tenants.models import SCOPE_VALIDATOR, ApiKey, Membership, Tenant
from tenants.scope import TenantScope, tenant_scope
from tenants.selectors import api_keys_in, tenants_in
from tools_app.catalog import services as tool_services
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.selectors import tools_in
from tools_app.catalog.spec import ToolSpec

# --- fields -----------------------------------------------------------------------------


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


class JsonValueField(serializers.JSONField):
    """Any JSON value, except strings with NUL characters (PostgreSQL cannot store them)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if _has_nul(value):
            raise serializers.ValidationError("Strings in this JSON may not contain NUL (\\u0000) characters.")
        return value


@extend_schema_field(OpenApiTypes.OBJECT)
class JsonObjectField(JsonValueField):
    """A JSON object (a schema, a backend configuration, tool arguments)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError(f"Expected a JSON object, got {type(value).__name__}.")
        return value


class StringListField(serializers.ListField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField(max_length=200))
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)


class ScopeListField(StringListField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=64, validators=[SCOPE_VALIDATOR]), **kwargs)


def request_scope(serializer: serializers.Field | serializers.BaseSerializer) -> TenantScope:
    return tenant_scope(serializer.context["request"])


@extend_schema_field(OpenApiTypes.STR)
class TenantField(serializers.SlugRelatedField):
    """A tenant named by its slug, among the caller's tenants (others look missing)."""

    default_error_messages = {"does_not_exist": "There is no tenant with the slug {value!r}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", **kwargs)

    def get_queryset(self) -> QuerySet[Tenant]:
        return tenants_in(request_scope(self))

    def to_internal_value(self, data: Any) -> Tenant:
        if not isinstance(data, str) or "\x00" in data:  # PostgreSQL cannot even compare NULs
            self.fail("invalid")
        return super().to_internal_value(data)  # type: ignore[no-any-return]


@extend_schema_field(OpenApiTypes.STR)
class UsernameField(serializers.SlugRelatedField):
    default_error_messages = {"does_not_exist": "There is no user with the username {value!r}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="username", queryset=get_user_model().objects.all(), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or "\x00" in data:
            self.fail("invalid")
        return super().to_internal_value(data)


class CreatedByField(serializers.SlugRelatedField):
    """The username of whoever made the object; null when made by a command or the user is gone."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "Username of whoever made it; null for commands and deleted users.")
        super().__init__(slug_field="username", read_only=True, allow_null=True, **kwargs)


def _credential_status(revoked_at: Any, expires_at: Any) -> str:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= timezone.now():
        return "expired"
    return "active"


STATUS_CHOICES = ["active", "expired", "revoked"]

# --- the caller -------------------------------------------------------------------------


class MembershipOfCallerSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_superuser = serializers.BooleanField(help_text="A platform admin: every tenant and the platform catalog.")
    memberships = MembershipOfCallerSerializer(many=True)


# --- tenants ----------------------------------------------------------------------------


class TenantSerializer(serializers.ModelSerializer):
    endpoint = serializers.SerializerMethodField(help_text="The tenant's MCP endpoint (path).")

    class Meta:
        model = Tenant
        fields = [
            "id",
            "slug",
            "name",
            "is_active",
            "allow_anonymous",
            "calls_per_minute",
            "max_concurrent_calls",
            "endpoint",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def get_endpoint(self, tenant: Tenant) -> str:
        return f"/mcp/{tenant.slug}"

    def create(self, validated_data: dict[str, Any]) -> Tenant:
        return tenant_services.tenant_create(**validated_data)

    def update(self, instance: Tenant, validated_data: dict[str, Any]) -> Tenant:
        return tenant_services.tenant_update(tenant=instance, changes=validated_data)


# --- memberships ------------------------------------------------------------------------


class MembershipSerializer(serializers.ModelSerializer):
    tenant = TenantField()
    user = UsernameField(help_text="The member's username.")

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators: list[Any] = []  # membership_add says "already a member" on the user field

    def create(self, validated_data: dict[str, Any]) -> Membership:
        return tenant_services.membership_add(**validated_data)


class MembershipUpdateSerializer(serializers.ModelSerializer):
    """A membership's tenant and user are fixed; to move it, delete it and add another."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "created_at"]
        read_only_fields = ["id", "created_at"]

    def update(self, instance: Membership, validated_data: dict[str, Any]) -> Membership:
        if "role" not in validated_data:
            return instance
        return tenant_services.membership_change_role(membership=instance, role=validated_data["role"])


# --- MCP API keys -----------------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    tenant = TenantField()
    scopes = ScopeListField(help_text='Scope strings, e.g. ["tools:read"]; access rules can match them.')
    status = serializers.SerializerMethodField()
    created_by = CreatedByField()

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "tenant",
            "name",
            "prefix",
            "scopes",
            "expires_at",
            "status",
            "revoked_at",
            "last_used_at",
            "created_at",
            "created_by",
        ]
        read_only_fields = ["id", "prefix", "revoked_at", "last_used_at", "created_at"]
        validators: list[Any] = []  # the service names the clashing field

    @extend_schema_field(serializers.ChoiceField(choices=STATUS_CHOICES))
    def get_status(self, key: ApiKey) -> str:
        return _credential_status(key.revoked_at, key.expires_at)

    def create(self, validated_data: dict[str, Any]) -> ApiKey:
        key, raw = tenant_services.api_key_create(**validated_data, created_by=self.context["request"].user)
        key.raw_key = raw  # type: ignore[attr-defined]  # shown in this response only
        return key


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.SerializerMethodField(help_text="The raw key. Shown in this response only; store it now.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]

    def get_key(self, key: ApiKey) -> str:
        return getattr(key, "raw_key", "")


class ApiKeyUpdateSerializer(ApiKeySerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    def update(self, instance: ApiKey, validated_data: dict[str, Any]) -> ApiKey:
        return tenant_services.api_key_update(key=instance, changes=validated_data)


# --- personal access tokens -------------------------------------------------------------


class AccessTokenSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()

    class Meta:
        model = PersonalAccessToken
        fields = ["id", "name", "prefix", "expires_at", "status", "revoked_at", "last_used_at", "created_at"]
        read_only_fields = ["id", "prefix", "revoked_at", "last_used_at", "created_at"]
        validators: list[Any] = []

    @extend_schema_field(serializers.ChoiceField(choices=STATUS_CHOICES))
    def get_status(self, token: PersonalAccessToken) -> str:
        return _credential_status(token.revoked_at, token.expires_at)

    def create(self, validated_data: dict[str, Any]) -> PersonalAccessToken:
        token, raw = access_token_create(user=self.context["request"].user, **validated_data)
        token.raw_token = raw  # type: ignore[attr-defined]  # shown in this response only
        return token


class AccessTokenCreatedSerializer(AccessTokenSerializer):
    token = serializers.SerializerMethodField(
        help_text="The raw token for 'Authorization: Bearer …'. Shown in this response only; store it now."
    )

    class Meta(AccessTokenSerializer.Meta):
        fields = [*AccessTokenSerializer.Meta.fields, "token"]

    def get_token(self, token: PersonalAccessToken) -> str:
        return getattr(token, "raw_token", "")


# --- tools ------------------------------------------------------------------------------

TOOL_FIELDS = [
    "name",
    "title",
    "description",
    "input_schema",
    "output_schema",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
    "icons",
    "tags",
    "backend_kind",
    "backend_config",
    "execution_mode",
    "task_support",
    "timeout_seconds",
    "enabled",
]


class ToolSerializer(serializers.ModelSerializer):
    tenant = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant the tool is private to; null (platform admins only) for the platform catalog. "
        "Fixed once the tool exists.",
    )
    input_schema = JsonObjectField(
        required=False, help_text='JSON Schema of the arguments (2020-12 unless "$schema" says otherwise).'
    )
    output_schema = JsonObjectField(
        required=False, allow_null=True, help_text="JSON Schema of the structured result, or null."
    )
    icons = JsonValueField(required=False, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].')
    tags = StringListField(help_text="Labels access rules can match with tag:<label>.")
    backend_config = JsonObjectField(
        required=False, help_text='Settings of the backend; the python backend needs {"handler": "<registered name>"}.'
    )
    mcp = serializers.SerializerMethodField(help_text="The tool exactly as tools/list shows it to MCP clients.")

    class Meta:
        model = Tool
        fields = ["id", "tenant", *TOOL_FIELDS, "version", "mcp", "created_at", "updated_at"]
        read_only_fields = ["id", "version", "created_at", "updated_at"]
        validators: list[Any] = []  # tool_check says which catalog a name clashes in

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_mcp(self, tool: Tool) -> dict[str, Any]:
        return ToolSpec.from_model(tool).wire

    def validate_tenant(self, tenant: Tenant | None) -> Tenant | None:
        if self.instance is not None and getattr(tenant, "pk", None) != self.instance.tenant_id:
            raise serializers.ValidationError("A tool cannot move to another catalog; create it there instead.")
        if tenant is None and not request_scope(self).platform:
            raise serializers.ValidationError(
                "Name the tenant the tool is private to; only platform admins add platform tools."
            )
        return tenant

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None and "tenant" not in attrs:
            try:
                attrs["tenant"] = self.validate_tenant(None)
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({"tenant": exc.detail}) from None
        return attrs

    def unsaved_tool(self) -> Tool:
        """The tool as it would be saved (for the dry run): a new one, or a changed copy."""
        data = dict(self.validated_data)
        if self.instance is None:
            return Tool(**data)
        tool = copy.copy(self.instance)
        for name, value in data.items():
            setattr(tool, name, value)
        return tool

    def create(self, validated_data: dict[str, Any]) -> Tool:
        tenant = validated_data.pop("tenant")
        return tool_services.tool_create(tenant=tenant, fields=validated_data)

    def update(self, instance: Tool, validated_data: dict[str, Any]) -> Tool:
        validated_data.pop("tenant", None)
        return tool_services.tool_update(tool=instance, changes=validated_data)


class ToolValidationSerializer(serializers.Serializer):
    valid = serializers.BooleanField(help_text="Always true: an invalid tool answers 400 naming the fields.")
    mcp = serializers.DictField(help_text="The tool as tools/list would show it once saved.")


class TestCallRequestSerializer(serializers.Serializer):
    arguments = JsonObjectField(required=False, default=dict, help_text="The call's arguments, as an MCP client sends.")


class NotificationSerializer(serializers.Serializer):
    method = serializers.CharField(help_text="notifications/progress or notifications/message")
    params = serializers.DictField()


class TestCallResultSerializer(serializers.Serializer):
    result = serializers.DictField(help_text="The CallToolResult an MCP client would have received.")
    is_error = serializers.BooleanField(help_text="The result's isError: invalid arguments, a tool error, a timeout.")
    notifications = NotificationSerializer(many=True, help_text="Progress and log messages the tool sent.")
    duration_ms = serializers.FloatField()


# --- access rules -----------------------------------------------------------------------


class ScopedToolField(serializers.PrimaryKeyRelatedField):
    """A tool the caller can see: any for platform admins, else their tenants' private tools."""

    default_error_messages = {"does_not_exist": "There is no tool with the id {pk_value!r}."}

    def get_queryset(self) -> QuerySet[Tool]:
        return tools_in(request_scope(self))


class ScopedApiKeyField(serializers.PrimaryKeyRelatedField):
    default_error_messages = {"does_not_exist": "There is no API key with the id {pk_value!r}."}

    def get_queryset(self) -> QuerySet[ApiKey]:
        return api_keys_in(request_scope(self))


class AccessRuleSerializer(serializers.ModelSerializer):
    tool = ScopedToolField(required=False, allow_null=True, help_text="One tool (its id); or use tool_pattern.")
    tool_pattern = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="A glob on tool names ('demo.*', '*', an exact name) or 'tag:<label>'; or use tool.",
    )
    tenant = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant the rule applies to; null (platform admins only) for every tenant. Fixed once "
        "the rule exists.",
    )
    owner = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant that manages the rule (null: a platform rule). Rules made by tenant admins are "
        "owned by their tenant, which may grant only its private tools. Fixed once the rule exists.",
    )
    api_keys = ScopedApiKeyField(many=True, required=False, help_text="Narrow the rule to these keys (ids).")
    scopes = ScopeListField(help_text="Narrow the rule to keys holding any of these scopes.")
    created_by = CreatedByField()

    class Meta:
        model = AccessRule
        fields = [
            "id",
            "effect",
            "tool",
            "tool_pattern",
            "tenant",
            "owner",
            "api_keys",
            "scopes",
            "note",
            "created_at",
            "updated_at",
            "created_by",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        scope = request_scope(self)
        rule = self.instance
        if rule is not None:
            for field in ("tenant", "owner"):
                current = getattr(rule, f"{field}_id")
                if field in attrs and getattr(attrs[field], "pk", None) != current:
                    raise serializers.ValidationError({field: "Fixed once the rule exists; make a new rule instead."})
                attrs.pop(field, None)
        else:
            tenant = attrs.get("tenant")
            if not scope.platform:
                if tenant is None:
                    raise serializers.ValidationError({"tenant": "Name the tenant the rule applies to."})
                owner = attrs.get("owner", tenant)
                if owner != tenant:
                    raise serializers.ValidationError({"owner": "Your rules are owned by the tenant they apply to."})
                attrs["owner"] = tenant
        if rule is not None:
            # Naming one kind of target on an existing rule replaces the other kind.
            if attrs.get("tool") is not None and "tool_pattern" not in attrs:
                attrs["tool_pattern"] = ""
            if attrs.get("tool_pattern") and "tool" not in attrs:
                attrs["tool"] = None
        tool = attrs.get("tool", getattr(rule, "tool", None))
        pattern = attrs.get("tool_pattern", getattr(rule, "tool_pattern", ""))
        if tool is not None and pattern:
            raise serializers.ValidationError({"tool_pattern": "Give either tool or tool_pattern, not both."})
        if tool is None and not pattern:
            raise serializers.ValidationError({"tool_pattern": "Give a tool or a tool_pattern."})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AccessRule:
        api_keys = validated_data.pop("api_keys", None)
        return tool_services.access_rule_create(
            fields=validated_data, api_keys=api_keys, created_by=self.context["request"].user
        )

    def update(self, instance: AccessRule, validated_data: dict[str, Any]) -> AccessRule:
        api_keys = validated_data.pop("api_keys", None)
        return tool_services.access_rule_update(rule=instance, changes=validated_data, api_keys=api_keys)


# --- MCP sessions -----------------------------------------------------------------------


class SessionSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug")
    id = serializers.CharField(help_text="The Mcp-Session-Id.")
    client = serializers.CharField(help_text="The client's name and version, as it announced them.")
    protocol_version = serializers.CharField()
    credential = serializers.CharField(help_text="The API key (name and prefix) the session is bound to.")
    started = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    stream_holder = serializers.CharField(
        allow_null=True, help_text="The server process holding its notification stream, if one is open."
    )


class SessionEndSerializer(serializers.Serializer):
    tenant = TenantField()
    session = serializers.CharField(max_length=128, help_text="The id of the session to end.")


# --- invocations and change audit (read-only) -------------------------------------------


class InvocationSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    arguments = serializers.JSONField(help_text="The call's arguments, sensitive fields redacted.")

    class Meta:
        model = Invocation
        fields = [
            "id",
            "tenant",
            "tool_name",
            "tool_id",
            "tool_version",
            "outcome",
            "error_message",
            "duration_ms",
            "key_id",
            "key_label",
            "session_id",
            "client_name",
            "client_version",
            "arguments",
            "run_id",
            "is_task",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(
        source="tenant_slug", help_text="The slug the tenant had; empty for platform objects."
    )
    actor = serializers.CharField(source="actor_label", help_text="Who made the change: a username, or a command.")
    changes = serializers.JSONField(help_text="field → [before, after], secrets redacted.")

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "tenant",
            "actor",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
            "created_at",
        ]
        read_only_fields = fields


class _TimeWindowFilter(serializers.Serializer):
    tenant = serializers.CharField(required=False, max_length=64, help_text="Only rows of this tenant (slug).")
    since = serializers.DateTimeField(required=False, help_text="Only rows from this time on (ISO 8601).")
    until = serializers.DateTimeField(required=False, help_text="Only rows before this time (ISO 8601).")


class InvocationFilter(_TimeWindowFilter):
    tool = serializers.CharField(required=False, max_length=128, help_text="Only calls of this tool (name).")
    key = serializers.IntegerField(required=False, min_value=1, help_text="Only calls made with this API key (id).")
    outcome = serializers.ChoiceField(required=False, choices=Invocation.Outcome.choices)
    session = serializers.CharField(required=False, max_length=128, help_text="Only calls of this MCP session.")
    run = serializers.CharField(required=False, max_length=32, help_text="Only this background run or MCP task.")


class AuditEventFilter(_TimeWindowFilter):
    object_type = serializers.CharField(
        required=False, max_length=100, help_text="e.g. tools_app.Tool, tenants.ApiKey, tools_app.AccessRule"
    )
    object_id = serializers.CharField(required=False, max_length=64)
    action = serializers.ChoiceField(required=False, choices=AuditEvent.Action.choices)
    source = serializers.ChoiceField(required=False, choices=AuditEvent.Source.choices)
    actor = serializers.CharField(required=False, max_length=200, help_text="Actors whose name contains this.")
