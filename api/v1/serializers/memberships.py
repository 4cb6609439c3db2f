"""Memberships as the v1 API shows, adds and changes them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.v1.serializers.fields import TenantField, UsernameField
from tenants import services as tenant_services
from tenants.models import Membership


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
