"""Tools and access rules as the tests make them: behind the ``make_tool`` and ``grant``
fixtures, and for module-scoped worlds that cannot use function-scoped fixtures."""

from __future__ import annotations

from typing import Any

from tenants.models import ApiKey, Tenant
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import access_rule_create, catalog_entry_create


def tool_make(name: str, *, tenant: Tenant | None = None, handler: str = "demo.echo", **fields: Any) -> Tool:
    """A tool as the tests make one."""
    defaults: dict[str, Any] = {
        "description": f"The {name} tool.",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "backend_config": {"handler": handler},
        # Test tools change nothing; the confirmation tests name the policy they exercise.
        "confirmation": "none",
    }
    defaults.update(fields)
    return catalog_entry_create(model=Tool, tenant=tenant, fields={"name": name, **defaults})


def rule_grant(
    tenant: Tenant | None,
    target: Tool | str,
    *,
    effect: str = "allow",
    keys: list[ApiKey] | None = None,
    scopes: list[str] | None = None,
    owner: Tenant | None = None,
) -> AccessRule:
    """An access rule for ``tenant`` (None: the platform) on a tool or a pattern."""
    fields = {
        "effect": effect,
        "tenant": tenant,
        "owner": owner,
        "tool": target if isinstance(target, Tool) else None,
        "tool_pattern": "" if isinstance(target, Tool) else target,
        "scopes": scopes or [],
    }
    return access_rule_create(fields=fields, api_keys=keys)
