"""Resources, resource templates and prompts as the v1 API shows and changes them."""

from __future__ import annotations

import base64
import binascii
from typing import Any, ClassVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.fields import JsonObjectField, JsonValueField, StringListField, TenantField, request_scope
from tenants.models import Tenant
from tools_app.catalog import services as catalog_services
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


class CatalogEntrySerializer(serializers.ModelSerializer):
    """What the three share with tools: the catalog (tenant), JSON fields, the MCP view."""

    spec: ClassVar[Any] = None

    tenant = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant it is private to; null (platform admins only) for the platform catalog. Fixed once "
        "it exists.",
    )
    icons = JsonValueField(required=False, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].')
    tags = StringListField(help_text="Labels access rules can match with tag:<label>.")
    backend_config = JsonObjectField(required=False, help_text="Settings of the backend.")
    mcp = serializers.SerializerMethodField(help_text="As MCP clients see it in their lists.")

    class Meta:
        validators: list[Any] = []  # catalog_entry_check says which catalog a name clashes in
        read_only_fields = ["id", "version", "created_at", "updated_at"]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_mcp(self, entry: Any) -> dict[str, Any]:
        return self.spec.from_model(entry).wire  # type: ignore[no-any-return]

    def validate_tenant(self, tenant: Tenant | None) -> Tenant | None:
        if self.instance is not None and getattr(tenant, "pk", None) != self.instance.tenant_id:
            raise serializers.ValidationError("It cannot move to another catalog; create it there instead.")
        if tenant is None and not request_scope(self).platform:
            raise serializers.ValidationError(
                "Name the tenant it is private to; only platform admins add platform ones."
            )
        return tenant

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None and "tenant" not in attrs:
            try:
                attrs["tenant"] = self.validate_tenant(None)
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({"tenant": exc.detail}) from None
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Any:
        tenant = validated_data.pop("tenant")
        model = self.Meta.model  # type: ignore[attr-defined]
        return catalog_services.catalog_entry_create(model=model, tenant=tenant, fields=validated_data)

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        validated_data.pop("tenant", None)
        return catalog_services.catalog_entry_update(entry=instance, changes=validated_data)


ENTRY_FIELDS = ["id", "tenant", "name", "title", "description", "icons", "tags", "enabled"]
BACKEND_FIELDS = ["backend_kind", "backend_config", "timeout_seconds"]
TAIL_FIELDS = ["version", "mcp", "created_at", "updated_at"]


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
