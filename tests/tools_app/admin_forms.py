"""What the admin's tool and access-rule forms post: every field, as a browser sends it."""

from __future__ import annotations

import json
from typing import Any


def tool_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "tenant": "",
        "name": "lookup",
        "title": "Lookup",
        "description": "Looks things up.",
        "enabled": "on",
        "input_schema": json.dumps({"type": "object", "properties": {"q": {"type": "string"}}}),
        "output_schema": "",
        "read_only_hint": "true",
        "destructive_hint": "unknown",
        "idempotent_hint": "unknown",
        "open_world_hint": "unknown",
        "icons": "",
        "tags": '["search"]',
        "backend_kind": "python",
        "handler": "demo.echo",
        "backend_config": "",
        "execution_mode": "inline",
        "task_support": "forbidden",
        "timeout_seconds": "30",
        "confirmation": "destructive",
    }
    data.update(overrides)
    return data


def rule_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "effect": "allow",
        "tool": "",
        "tool_pattern": "",
        "tenant": "",
        "owner": "",
        "scopes": "",
        "enabled": "on",
        "note": "",
    }
    data.update(overrides)
    return data


def curation_data(initial: int = 0, **fields: Any) -> dict[str, Any]:
    """The curation inline on a tool's change page (prefix ``curation``), as a browser posts it."""
    data = {
        "curation-TOTAL_FORMS": "1",
        "curation-INITIAL_FORMS": str(initial),
        "curation-MIN_NUM_FORMS": "0",
        "curation-MAX_NUM_FORMS": "1",
        "curation-0-name": "",
        "curation-0-title": "",
        "curation-0-description": "",
        "curation-0-arguments": "",
    }
    data.update({f"curation-0-{name}": value for name, value in fields.items()})
    return data
