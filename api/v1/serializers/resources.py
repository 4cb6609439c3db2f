"""Resources, resource templates and prompts as the v1 API shows and changes them (what they
share with tools is in ``entries``)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.entries import BACKEND_FIELDS, ENTRY_FIELDS, TAIL_FIELDS, CatalogEntrySerializer
from api.v1.serializers.fields import JsonObjectField, JsonValueField
from tools_app.catalog.models import Prompt, Resource, ResourceTemplate
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec


@extend_schema_field(OpenApiTypes.STR)
class Base64Field(serializers.Field):
    """Binary content as base64 text; null for none."""

    def to_representation(self, value: Any) -> str | None:
        return base64.b64encode(bytes(value)).decode("ascii") if value is not None else None

    def to_internal_value(self, data: Any) -> bytes | None:
        if data is None:
            return None
        if not isinstance(data, str):
            raise serializers.ValidationError("Binary content is base64 text.")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("This is not valid base64.") from None


class ResourceSerializer(CatalogEntrySerializer):
    spec = ResourceSpec
    blob = Base64Field(required=False, allow_null=True, help_text="Binary content (base64); served instead of text.")
    audience = JsonValueField(required=False, help_text='["user"], ["assistant"], both, or [].')

    class Meta(CatalogEntrySerializer.Meta):
        model = Resource
        fields = [
            *ENTRY_FIELDS[:2], "uri", *ENTRY_FIELDS[2:], "mime_type", "text", "blob", "size", "last_modified",
            "audience", "priority", *BACKEND_FIELDS, *TAIL_FIELDS,
        ]  # fmt: skip
        read_only_fields = [*CatalogEntrySerializer.Meta.read_only_fields, "size", "last_modified"]


class ResourceTemplateSerializer(CatalogEntrySerializer):
    spec = TemplateSpec
    audience = JsonValueField(required=False, help_text='["user"], ["assistant"], both, or [].')
    completions = JsonObjectField(required=False, help_text='Values offered per variable: {"id": ["1", "2"]}.')

    class Meta(CatalogEntrySerializer.Meta):
        model = ResourceTemplate
        fields = [
            *ENTRY_FIELDS[:2], "uri_template", *ENTRY_FIELDS[2:], "mime_type", "audience", "priority",
            *BACKEND_FIELDS, "completions", *TAIL_FIELDS,
        ]  # fmt: skip


class PromptSerializer(CatalogEntrySerializer):
    spec = PromptSpec
    arguments = JsonValueField(required=False, help_text='[{"name": "topic", "description": "…", "required": true}].')
    messages = JsonValueField(
        required=False,
        help_text='[{"role": "user", "content": {"type": "text", "text": "Explain {{topic}}."}}]; text is Mustache.',
    )
    completions = JsonObjectField(required=False, help_text='Values offered per argument: {"topic": ["…"]}.')

    class Meta(CatalogEntrySerializer.Meta):
        model = Prompt
        fields = [*ENTRY_FIELDS, "arguments", "messages", *BACKEND_FIELDS, "completions", *TAIL_FIELDS]
