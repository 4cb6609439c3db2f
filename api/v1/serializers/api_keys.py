"""MCP API keys as the v1 API shows, creates (raw key once) and changes them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.fields import STATUS_CHOICES, CreatedByField, ScopeListField, TenantField, credential_status
from tenants import services as tenant_services
from tenants.models import ApiKey


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
            "tool_listing",
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
        return credential_status(key.revoked_at, key.expires_at)

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
