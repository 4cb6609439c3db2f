"""OAuth of a tenant as the v1 API shows and changes it: settings, trusted issuers, clients of
the embedded server (pre-registered ones are made here, their secret said once) and the
consents members gave."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.v1.serializers.fields import TenantField
from oauth import services as oauth_services
from oauth.connections import services as connection_services
from oauth.models import Connection, ConnectionProvider, Grant, OAuthClient, TenantOAuth, TrustedIssuer
from oauth.server.clients import ClientMetadataError


class OAuthSettingsSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = TenantOAuth
        fields = ["tenant", "enabled", "embedded_server", "registration_open", "list_scope", "call_scope", "updated_at"]
        read_only_fields = ["tenant", "updated_at"]


class TrustedIssuerSerializer(serializers.ModelSerializer):
    tenant = TenantField()
    client_secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        help_text="Introspection credentials: the client secret (stored encrypted, never shown; '' clears it).",
    )
    has_client_secret = serializers.SerializerMethodField()

    class Meta:
        model = TrustedIssuer
        fields = [
            "id", "tenant", "issuer", "enabled", "advertise", "validation", "discovery", "jwks_uri",
            "introspection_endpoint", "client_id", "client_secret", "has_client_secret", "audience", "subject_claim",
            "groups_claim", "scope_claim", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []

    def get_has_client_secret(self, issuer: TrustedIssuer) -> bool:
        return bool(issuer.client_secret_sealed)

    def create(self, validated_data: dict[str, Any]) -> TrustedIssuer:
        tenant = validated_data.pop("tenant")
        secret = validated_data.pop("client_secret", None)
        return oauth_services.trusted_issuer_save(tenant=tenant, fields=validated_data, client_secret=secret)

    def update(self, instance: TrustedIssuer, validated_data: dict[str, Any]) -> TrustedIssuer:
        validated_data.pop("tenant", None)  # fixed once made
        secret = validated_data.pop("client_secret", None)
        return oauth_services.trusted_issuer_save(
            tenant=instance.tenant, fields=validated_data, client_secret=secret, issuer=instance
        )


class OAuthClientSerializer(serializers.ModelSerializer):
    tenant = TenantField()
    public = serializers.BooleanField(
        write_only=True, default=True, help_text="A public client (PKCE, no secret); false: client_secret_basic."
    )

    class Meta:
        model = OAuthClient
        fields = [
            "id", "tenant", "client_id", "kind", "client_name", "redirect_uris", "grant_types",
            "token_endpoint_auth_method", "public", "created_at",
        ]  # fmt: skip
        read_only_fields = ["id", "client_id", "kind", "grant_types", "token_endpoint_auth_method", "created_at"]
        extra_kwargs = {"client_name": {"required": True, "allow_blank": False}}

    def create(self, validated_data: dict[str, Any]) -> OAuthClient:
        try:
            client, secret = oauth_services.client_preregister(
                tenant=validated_data["tenant"],
                name=validated_data["client_name"],
                redirect_uris=validated_data.get("redirect_uris") or [],
                public=validated_data["public"],
                created_by=self.context["request"].user,
            )
        except ClientMetadataError as exc:
            raise serializers.ValidationError({"redirect_uris": [str(exc)]}) from None
        self.issued_secret = secret
        return client


class OAuthClientCreatedSerializer(OAuthClientSerializer):
    client_secret = serializers.SerializerMethodField(help_text="Shown once; null for public clients.")

    class Meta(OAuthClientSerializer.Meta):
        fields = [*OAuthClientSerializer.Meta.fields, "client_secret"]

    def get_client_secret(self, client: OAuthClient) -> str | None:
        secret: str | None = self.context.get("client_secret")
        return secret


class GrantSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    client_id = serializers.CharField(source="client.client_id", read_only=True)
    client_name = serializers.CharField(source="client.client_name", read_only=True)

    class Meta:
        model = Grant
        fields = ["id", "tenant", "user", "client_id", "client_name", "scope", "created_at", "revoked_at"]
        read_only_fields = fields


class ConnectionProviderSerializer(serializers.ModelSerializer):
    """A tenant's connection provider; the client secret is write-only (stored sealed)."""

    tenant = TenantField()
    client_secret = serializers.CharField(
        write_only=True, required=False, allow_blank=True, help_text="Stored encrypted, never shown; '' clears it."
    )
    has_client_secret = serializers.SerializerMethodField()
    redirect_uri = serializers.SerializerMethodField(help_text="What to register at the provider.")

    class Meta:
        model = ConnectionProvider
        fields = [
            "id", "tenant", "name", "display_name", "issuer", "authorization_endpoint", "token_endpoint",
            "revocation_endpoint", "userinfo_endpoint", "client_id", "client_secret", "has_client_secret",
            "token_endpoint_auth_method", "scopes", "pkce", "extra_authorize_params", "redirect_uri", "created_at",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_at", "updated_at"]
        validators: list[Any] = []

    def get_has_client_secret(self, provider: ConnectionProvider) -> bool:
        return bool(provider.client_secret_sealed)

    def get_redirect_uri(self, provider: ConnectionProvider) -> str:
        return connection_services.redirect_uri(connection_services.public_base(), provider)

    def create(self, validated_data: dict[str, Any]) -> ConnectionProvider:
        tenant = validated_data.pop("tenant")
        name = validated_data.pop("name")
        secret = validated_data.pop("client_secret", None)
        return connection_services.provider_save(tenant=tenant, name=name, fields=validated_data, client_secret=secret)

    def update(self, instance: ConnectionProvider, validated_data: dict[str, Any]) -> ConnectionProvider:
        validated_data.pop("tenant", None)  # fixed once made
        validated_data.pop("name", None)
        secret = validated_data.pop("client_secret", None)
        return connection_services.provider_save(
            tenant=instance.tenant, name=instance.name, fields=validated_data, client_secret=secret
        )


class ConnectionSerializer(serializers.ModelSerializer):
    """Who is connected to what; never a token."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    provider = serializers.CharField(source="provider.name", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Connection
        fields = [
            "id", "tenant", "provider", "user", "label", "account", "scopes", "expires_at", "created_at",
            "refreshed_at", "last_used_at",
        ]  # fmt: skip
        read_only_fields = fields
