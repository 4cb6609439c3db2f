"""Access rules as the v1 API shows and changes them; their tool and key choices are the
caller's."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers

from api.v1.serializers.fields import CreatedByField, ScopeListField, StringListField, TenantField, request_scope
from tenants.models import ApiKey
from tenants.selectors import api_keys_in
from tools_app.catalog import services as tool_services
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.selectors import entries_in


class ScopedToolField(serializers.PrimaryKeyRelatedField):
    """A tool the caller can see: any for platform admins, else their tenants' private tools."""

    default_error_messages = {"does_not_exist": "There is no tool with the id {pk_value!r}."}

    def get_queryset(self) -> QuerySet[Tool]:
        return entries_in(Tool, request_scope(self))


class ScopedApiKeyField(serializers.PrimaryKeyRelatedField):
    default_error_messages = {"does_not_exist": "There is no API key with the id {pk_value!r}."}

    def get_queryset(self) -> QuerySet[ApiKey]:
        return api_keys_in(request_scope(self))


class AccessRuleSerializer(serializers.ModelSerializer):
    tool = ScopedToolField(required=False, allow_null=True, help_text="One tool (its id); or use tool_pattern.")
    tool_pattern = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="A glob on names ('demo.*', '*', an exact name; resources also match by URI) or 'tag:<label>', "
        "matching what kind names; or use tool.",
    )
    tenant = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant the rule applies to; null (platform admins only) for every tenant. Fixed once "
        "the rule exists.",
    )
    owner = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant that manages the rule (null: a platform rule). Rules made by tenant admins are "
        "owned by their tenant, which may grant only its private tools. Fixed once the rule exists.",
    )
    api_keys = ScopedApiKeyField(many=True, required=False, help_text="Narrow the rule to these keys (ids).")
    scopes = ScopeListField(help_text="Narrow the rule to credentials holding any of these scopes (key or token).")
    oauth_subjects = StringListField(
        child=serializers.CharField(max_length=255),
        help_text="Narrow the rule to OAuth callers with one of these subjects (the token's subject claim).",
    )
    oauth_groups = StringListField(
        child=serializers.CharField(max_length=255),
        help_text="Narrow the rule to OAuth callers in one of these groups (the groups or roles claim).",
    )
    created_by = CreatedByField()

    class Meta:
        model = AccessRule
        fields = [
            "id",
            "effect",
            "kind",
            "tool",
            "tool_pattern",
            "tenant",
            "owner",
            "api_keys",
            "oauth_subjects",
            "oauth_groups",
            "scopes",
            "confirmation",
            "always_visible",
            "note",
            "created_at",
            "updated_at",
            "created_by",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        scope = request_scope(self)
        rule = self.instance
        if rule is not None:
            for field in ("tenant", "owner"):
                current = getattr(rule, f"{field}_id")
                if field in attrs and getattr(attrs[field], "pk", None) != current:
                    raise serializers.ValidationError({field: "Fixed once the rule exists; make a new rule instead."})
                attrs.pop(field, None)
        else:
            tenant = attrs.get("tenant")
            if not scope.platform:
                if tenant is None:
                    raise serializers.ValidationError({"tenant": "Name the tenant the rule applies to."})
                owner = attrs.get("owner", tenant)
                if owner != tenant:
                    raise serializers.ValidationError({"owner": "Your rules are owned by the tenant they apply to."})
                attrs["owner"] = tenant
        if rule is not None:
            # Naming one kind of target on an existing rule replaces the other kind.
            if attrs.get("tool") is not None and "tool_pattern" not in attrs:
                attrs["tool_pattern"] = ""
            if attrs.get("tool_pattern") and "tool" not in attrs:
                attrs["tool"] = None
        tool = attrs.get("tool", getattr(rule, "tool", None))
        pattern = attrs.get("tool_pattern", getattr(rule, "tool_pattern", ""))
        if tool is not None and pattern:
            raise serializers.ValidationError({"tool_pattern": "Give either tool or tool_pattern, not both."})
        if tool is None and not pattern:
            raise serializers.ValidationError({"tool_pattern": "Give a tool or a tool_pattern."})
        if tool is not None and attrs.get("kind", getattr(rule, "kind", "tool")) != "tool":
            raise serializers.ValidationError({"kind": "A rule on one tool is a tools rule (kind tool)."})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AccessRule:
        api_keys = validated_data.pop("api_keys", None)
        return tool_services.access_rule_create(
            fields=validated_data, api_keys=api_keys, created_by=self.context["request"].user
        )

    def update(self, instance: AccessRule, validated_data: dict[str, Any]) -> AccessRule:
        api_keys = validated_data.pop("api_keys", None)
        return tool_services.access_rule_update(rule=instance, changes=validated_data, api_keys=api_keys)
