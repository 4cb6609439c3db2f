"""Open MCP sessions as the v1 API lists them, and the request that ends one."""

from __future__ import annotations

from rest_framework import serializers

from api.v1.serializers.fields import TenantField


class SessionSerializer(serializers.Serializer):
    tenant = serializers.CharField(source="tenant.slug")
    id = serializers.CharField(help_text="The Mcp-Session-Id.")
    client = serializers.CharField(help_text="The client's name and version, as it announced them.")
    protocol_version = serializers.CharField()
    credential = serializers.CharField(help_text="The API key (name and prefix) the session is bound to.")
    started = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    stream_holder = serializers.CharField(
        allow_null=True, help_text="The server process holding its notification stream, if one is open."
    )


class SessionEndSerializer(serializers.Serializer):
    tenant = TenantField()
    session = serializers.CharField(max_length=128, help_text="The id of the session to end.")
