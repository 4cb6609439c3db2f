"""Invocations and change events as the v1 API shows them (read-only), and the filters of
their lists."""

from __future__ import annotations

from rest_framework import serializers

from audit.models import AuditEvent, ConfirmationOutcome, Invocation


class InvocationSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    arguments = serializers.JSONField(help_text="The call's arguments, sensitive fields redacted.")
    confirmation = serializers.CharField(
        read_only=True,
        help_text="What became of the confirmation the call needed: asked, granted, declined, cancelled, "
        "timed_out or refused; empty when it needed none.",
    )

    class Meta:
        model = Invocation
        fields = [
            "id",
            "tenant",
            "kind",
            "tool_name",
            "tool_id",
            "tool_version",
            "outcome",
            "error_message",
            "duration_ms",
            "key_id",
            "key_label",
            "oauth_subject",
            "oauth_client",
            "session_id",
            "protocol_version",
            "client_name",
            "client_version",
            "arguments",
            "run_id",
            "is_task",
            "confirmation",
            "confirmed_by",
            "confirmed_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(
        source="tenant_slug", help_text="The slug the tenant had; empty for platform objects."
    )
    actor = serializers.CharField(source="actor_label", help_text="Who made the change: a username, or a command.")
    changes = serializers.JSONField(help_text="field → [before, after], secrets redacted.")

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "tenant",
            "actor",
            "oauth_subject",
            "oauth_client",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
            "created_at",
        ]
        read_only_fields = fields


class _TimeWindowFilter(serializers.Serializer):
    tenant = serializers.CharField(required=False, max_length=64, help_text="Only rows of this tenant (slug).")
    since = serializers.DateTimeField(required=False, help_text="Only rows from this time on (ISO 8601).")
    until = serializers.DateTimeField(required=False, help_text="Only rows before this time (ISO 8601).")


class _OAuthFilter(serializers.Serializer):
    oauth_subject = serializers.CharField(
        required=False, max_length=255, help_text="Only rows of this OAuth subject (the token's subject claim)."
    )
    oauth_client = serializers.CharField(
        required=False, max_length=255, help_text="Only rows of this OAuth client (its client_id)."
    )


class InvocationFilter(_TimeWindowFilter, _OAuthFilter):
    tool = serializers.CharField(
        required=False,
        max_length=1024,
        help_text="Only calls of this tool, gets of this prompt (name) or reads of this URI.",
    )
    kind = serializers.ChoiceField(
        required=False, choices=Invocation.Kind.choices, help_text="tool, resource or prompt"
    )
    key = serializers.IntegerField(required=False, min_value=1, help_text="Only calls made with this API key (id).")
    outcome = serializers.ChoiceField(required=False, choices=Invocation.Outcome.choices)
    revision = serializers.CharField(
        required=False, max_length=16, help_text="Only calls made on this MCP protocol revision, e.g. 2026-07-28."
    )
    session = serializers.CharField(required=False, max_length=128, help_text="Only calls of this MCP session.")
    run = serializers.CharField(required=False, max_length=32, help_text="Only this background run or MCP task.")
    confirmation = serializers.ChoiceField(
        required=False,
        choices=ConfirmationOutcome.choices,
        help_text="Only calls whose confirmation ended so: asked, granted, declined, cancelled, timed_out, refused.",
    )


class AuditEventFilter(_TimeWindowFilter, _OAuthFilter):
    object_type = serializers.CharField(
        required=False, max_length=100, help_text="e.g. tools_app.Tool, tenants.ApiKey, tools_app.AccessRule"
    )
    object_id = serializers.CharField(required=False, max_length=64)
    action = serializers.ChoiceField(required=False, choices=AuditEvent.Action.choices)
    source = serializers.ChoiceField(required=False, choices=AuditEvent.Source.choices)
    actor = serializers.CharField(required=False, max_length=200, help_text="Actors whose name contains this.")
