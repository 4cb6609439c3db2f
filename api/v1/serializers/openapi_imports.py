"""An OpenAPI import as the v1 API takes it (the document as text or a URL) and answers it."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.v1.serializers.fields import TenantField


class OpenApiImportRequestSerializer(serializers.Serializer):
    tenant = TenantField(
        required=False, allow_null=True, help_text="The tenant whose private tools these become; null: platform tools."
    )
    document = serializers.CharField(
        required=False, allow_blank=False, trim_whitespace=False, help_text="The document (JSON or YAML)."
    )
    url = serializers.URLField(required=False, help_text="Or where to fetch it (through the SSRF guard).")
    prefix = serializers.CharField(required=False, default="", allow_blank=True, max_length=60)
    base_url = serializers.URLField(required=False, default="", allow_blank=True)
    name = serializers.CharField(required=False, default="", allow_blank=True, max_length=60)
    include = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    openapi_tags = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    paths = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    labels = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    connection_provider = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=64,
        help_text="The connection provider whose per-user tokens OAuth2 (authorization code, implicit, password) "
        "and OpenID Connect schemes use; default: the registered provider whose endpoints or issuer match the "
        "document's, else the tools name the provider <source>-<scheme> and answer an error until it exists.",
    )
    client_id = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=255,
        help_text="The OAuth client ID of OAuth2 client-credentials schemes (the client secret is the vault "
        "secret <source>-<scheme>).",
    )
    grant = serializers.BooleanField(required=False, default=False)
    dry_run = serializers.BooleanField(required=False, default=False, help_text="Preview only; nothing is saved.")
    approve = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Publish changed definitions of tools an earlier import made; without it they wait for "
        "approval (action park) and clients keep the approved ones.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("document")) == bool(attrs.get("url")):
            raise serializers.ValidationError("Give the document or its url (one of them).")
        if attrs["grant"] and attrs.get("tenant") is None:
            raise serializers.ValidationError({"grant": ["A grant needs a tenant."]})
        return attrs


class PlannedToolSerializer(serializers.Serializer):
    action = serializers.ChoiceField(
        choices=["create", "update", "park", "unchanged"],
        help_text="park: the definition changed and waits for approval (see /api/v1/pending-definitions/).",
    )
    name = serializers.CharField()
    operation = serializers.CharField(help_text='e.g. "GET /pets/{id}"')
    changes = serializers.ListField(child=serializers.CharField(), help_text="Changed fields (updates).")


class SkippedOperationSerializer(serializers.Serializer):
    operation = serializers.CharField()
    reason = serializers.CharField(help_text="Starts with the place in the document.")


class OpenApiImportResultSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="The source's name; its tools carry the tag openapi:<source>.")
    sha256 = serializers.CharField()
    version = serializers.CharField()
    base_url = serializers.CharField()
    dry_run = serializers.BooleanField()
    document_changed = serializers.BooleanField()
    tools = PlannedToolSerializer(many=True)
    skipped = SkippedOperationSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())
    missing = serializers.ListField(child=serializers.CharField(), help_text="Earlier tools whose operation is gone.")
