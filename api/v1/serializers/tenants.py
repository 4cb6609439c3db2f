"""Tenants as the v1 API shows and changes them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from tenants import services as tenant_services
from tenants.models import Tenant


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
            "api_keys_enabled",
            "calls_per_minute",
            "max_concurrent_calls",
            "tool_listing",
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
