"""Tool definitions in code: what a pack offers and ``seed_demo`` installs as ``Tool`` rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolDefinition:
    """A tool a pack offers; ``tool_install`` turns it into a ``Tool`` row."""

    name: str
    handler: str
    description: str
    title: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object", "additionalProperties": False})
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, bool] = field(default_factory=dict)
    timeout_seconds: float = 30.0
    execution_mode: str = "inline"
    task_support: str = "forbidden"
