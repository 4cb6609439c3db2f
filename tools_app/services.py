"""Writes about tools and access rules."""

from __future__ import annotations

from django.db import transaction

from tenants.models import Tenant
from tools_app.models import AccessRule, Tool
from tools_app.registry import ToolDefinition


@transaction.atomic
def tool_install(*, definition: ToolDefinition, tags: list[str], tenant: Tenant | None = None) -> Tool:
    """Create or update a tool from a pack definition (idempotent: unchanged tools keep their version)."""
    fields = {
        "title": definition.title,
        "description": definition.description,
        "input_schema": definition.input_schema,
        "output_schema": definition.output_schema,
        "read_only_hint": definition.annotations.get("readOnlyHint"),
        "destructive_hint": definition.annotations.get("destructiveHint"),
        "idempotent_hint": definition.annotations.get("idempotentHint"),
        "open_world_hint": definition.annotations.get("openWorldHint"),
        "tags": tags,
        "backend_kind": Tool.Backend.PYTHON,
        "backend_config": {"handler": definition.handler},
        "execution_mode": definition.execution_mode,
        "task_support": definition.task_support,
        "timeout_seconds": definition.timeout_seconds,
    }
    tool = Tool.objects.filter(tenant=tenant, name=definition.name).first()
    if tool is None:
        tool = Tool(tenant=tenant, name=definition.name, **fields)
        tool.full_clean()
        tool.save()
        return tool
    changed = [name for name, value in fields.items() if getattr(tool, name) != value]
    if changed:
        for name in changed:
            setattr(tool, name, fields[name])
        tool.full_clean()
        tool.save()
    return tool


@transaction.atomic
def access_rule_grant_pattern(*, tenant: Tenant | None, pattern: str, note: str = "") -> AccessRule:
    """An allow rule for a pattern (idempotent)."""
    rule, _ = AccessRule.objects.get_or_create(
        effect=AccessRule.Effect.ALLOW,
        tool=None,
        tool_pattern=pattern,
        tenant=tenant,
        owner=None,
        defaults={"note": note},
    )
    return rule
