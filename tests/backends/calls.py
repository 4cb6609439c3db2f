"""Calling a tool in the backend tests: through the real path of the admin's test call."""

from __future__ import annotations

import base64
from typing import Any

from tools_app.catalog.models import Tool
from tools_app.runs.trial_calls import TrialOutcome, tool_test_call

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def call(tool: Tool, arguments: dict[str, Any] | None = None) -> TrialOutcome:
    """Run the tool through the real path (validation, backend, output check)."""
    tool.refresh_from_db()
    return tool_test_call(tool=tool, arguments=arguments or {})


def text_of(outcome: TrialOutcome) -> str:
    return "\n".join(block.get("text", "") for block in outcome.result["content"])
