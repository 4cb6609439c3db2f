"""Tools as the v1 API shows, checks and changes them (what they share with resources and
prompts is in ``entries``); dry runs and test calls."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.entries import ENTRY_FIELDS, TAIL_FIELDS, CatalogEntrySerializer
from api.v1.serializers.fields import JsonObjectField, json_object
from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec


class ToolSerializer(CatalogEntrySerializer):
    spec = ToolSpec
    input_schema = JsonObjectField(
        required=False, help_text='JSON Schema of the arguments (2020-12 unless "$schema" says otherwise).'
    )
    output_schema = JsonObjectField(
        required=False, allow_null=True, help_text="JSON Schema of the structured result, or null."
    )
    backend_config = JsonObjectField(
        required=False, help_text='Settings of the backend; the python backend needs {"handler": "<registered name>"}.'
    )
    mcp = serializers.SerializerMethodField(help_text="The tool exactly as tools/list shows it to MCP clients.")

    class Meta(CatalogEntrySerializer.Meta):
        model = Tool
        fields = [
            *ENTRY_FIELDS[:5], "input_schema", "output_schema", "read_only_hint", "destructive_hint",
            "idempotent_hint", "open_world_hint", *ENTRY_FIELDS[5:7], "backend_kind", "backend_config",
            "execution_mode", "task_support", "timeout_seconds", "confirmation", "always_visible", ENTRY_FIELDS[7],
            *TAIL_FIELDS,
        ]  # fmt: skip


class ToolValidationSerializer(serializers.Serializer):
    valid = serializers.BooleanField(help_text="Always true: an invalid tool answers 400 naming the fields.")
    mcp = serializers.DictField(help_text="The tool as tools/list would show it once saved.")


@extend_schema_field(OpenApiTypes.OBJECT)
class CallArgumentsField(serializers.JSONField):
    """A call's arguments: any JSON object, NUL included, exactly as on the MCP endpoint
    (nothing of a test call is stored; mcp_platform/mcp/text.py has the one rule for NUL)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return json_object(super().to_internal_value(data))


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
