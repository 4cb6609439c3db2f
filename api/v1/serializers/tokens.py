"""Personal access tokens as the v1 API shows and creates them (raw token once)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.models import PersonalAccessToken
from api.services import access_token_create
from api.v1.serializers.fields import STATUS_CHOICES, credential_status


class AccessTokenSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()

    class Meta:
        model = PersonalAccessToken
        fields = ["id", "name", "prefix", "expires_at", "status", "revoked_at", "last_used_at", "created_at"]
        read_only_fields = ["id", "prefix", "revoked_at", "last_used_at", "created_at"]
        validators: list[Any] = []

    @extend_schema_field(serializers.ChoiceField(choices=STATUS_CHOICES))
    def get_status(self, token: PersonalAccessToken) -> str:
        return credential_status(token.revoked_at, token.expires_at)

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
