"""Tools as the v1 API shows, checks and changes them (what they share with resources and
prompts is in ``entries``); dry runs and test calls."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.entries import ENTRY_FIELDS, TAIL_FIELDS, CatalogEntrySerializer
from api.v1.serializers.fields import JsonObjectField, json_object
from tools_app.catalog.curation import apply_curation
from tools_app.catalog.models import Tool, ToolCuration
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


class ToolCurationSerializer(serializers.Serializer):
    """What the model sees of a tool instead of its source definition (README: "Curation")."""

    name = serializers.CharField(
        required=False, allow_blank=True, max_length=128, help_text="The published name; empty: the tool's own."
    )
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, help_text="Empty: the tool's own.")
    description = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False, help_text="Empty: the tool's own."
    )
    arguments = JsonObjectField(
        required=False,
        help_text='Rules per argument of the source inputSchema, e.g. {"account": {"hidden": true, "value": "acme"}, '
        '"limit": {"default": 20, "maximum": 50}, "status": {"enum": ["open"]}}. Keys: hidden, value, default, '
        "enum, minimum, maximum, minLength, maxLength, pattern, title, description. A rule that would widen "
        "the source is refused (400 naming the argument).",
    )
    version = serializers.IntegerField(read_only=True, allow_null=True, help_text="Null: no curation.")
    source = serializers.DictField(
        read_only=True, help_text="The tool's source definition, as tools/list would show it."
    )
    published = serializers.DictField(read_only=True, help_text="What tools/list shows: the curation applied.")
    problems = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Rules that no longer fit the source (it changed since) and are left out until fixed.",
    )


def curation_view(tool: Tool) -> dict[str, Any]:
    """The curation of ``tool`` with its source and published definitions, side by side."""
    curation = ToolCuration.objects.filter(tool=tool).first()
    tool.refresh_from_db()  # the reverse relation is cached: read the curation as it is now
    problems = apply_curation(tool.input_schema, curation.arguments, strict=False).problems if curation else ()
    return {
        "name": curation.name if curation else "",
        "title": curation.title if curation else "",
        "description": curation.description if curation else "",
        "arguments": curation.arguments if curation else {},
        "version": curation.version if curation else None,
        "source": ToolSpec.from_model(tool, curated=False).wire,
        "published": ToolSpec.from_model(tool).wire,
        "problems": list(problems),
    }
