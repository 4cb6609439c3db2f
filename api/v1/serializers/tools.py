"""Tools as the v1 API shows, checks and changes them; dry runs and test calls."""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.fields import JsonObjectField, JsonValueField, StringListField, TenantField, request_scope
from tenants.models import Tenant
from tools_app.catalog import services as tool_services
from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec

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
    "confirmation",
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


@extend_schema_field(OpenApiTypes.OBJECT)
class CallArgumentsField(serializers.JSONField):
    """A call's arguments: any JSON object, NUL included, exactly as on the MCP endpoint
    (nothing of a test call is stored; mcp_platform/mcp/text.py has the one rule for NUL)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError(f"Expected a JSON object, got {type(value).__name__}.")
        return value


class TestCallRequestSerializer(serializers.Serializer):
    arguments = CallArgumentsField(
        required=False, default=dict, help_text="The call's arguments, as an MCP client sends."
    )


class NotificationSerializer(serializers.Serializer):
    method = serializers.CharField(help_text="notifications/progress or notifications/message")
    params = serializers.DictField()


class TestCallResultSerializer(serializers.Serializer):
    result = serializers.DictField(help_text="The CallToolResult an MCP client would have received.")
    is_error = serializers.BooleanField(help_text="The result's isError: invalid arguments, a tool error, a timeout.")
    notifications = NotificationSerializer(many=True, help_text="Progress and log messages the tool sent.")
    duration_ms = serializers.FloatField()
