"""Pending definitions as the v1 API shows them: the proposal, its diff and its decision."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from tools_app.catalog.models import PendingDefinition


class PendingDefinitionSerializer(serializers.ModelSerializer[PendingDefinition]):
    tool_name = serializers.CharField(source="tool.name", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    decided_by = serializers.SerializerMethodField()
    diff = serializers.SerializerMethodField()

    class Meta:
        model = PendingDefinition
        fields = [
            "id",
            "tool",
            "tool_name",
            "tenant",
            "source_kind",
            "source_id",
            "source_name",
            "status",
            "diff",
            "created_at",
            "decided_at",
            "decided_by",
            "note",
        ]
        read_only_fields = fields

    def get_decided_by(self, obj: PendingDefinition) -> str | None:
        return obj.decided_by.get_username() if obj.decided_by is not None else None

    def get_diff(self, obj: PendingDefinition) -> dict[str, Any]:
        """field → {"pinned": what clients see now, "proposed": what the source offers}."""
        return {name: {"pinned": pair[0], "proposed": pair[1]} for name, pair in obj.diff.items()}


class PendingDefinitionFilter(serializers.Serializer):
    tenant = serializers.CharField(required=False, help_text="Only those of the tenant with this slug.")
    status = serializers.ChoiceField(
        choices=PendingDefinition.Status.choices, required=False, help_text="Only those with this status."
    )
    tool = serializers.CharField(required=False, help_text="Only those of the tool with this name.")
