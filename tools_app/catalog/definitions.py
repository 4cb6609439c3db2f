"""Definitions in code: the tools, resources, templates and prompts a pack offers and
``seed_demo`` installs as catalog rows."""

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
    # The model's default: the user confirms unless the annotations say read-only or harmless.
    confirmation: str = "destructive"


@dataclass(frozen=True)
class ResourceDefinition:
    """A static resource a pack offers (``text``, or ``blob`` for binary content)."""

    uri: str
    name: str
    description: str = ""
    title: str = ""
    mime_type: str = "text/plain"
    text: str = ""
    blob: bytes | None = None


@dataclass(frozen=True)
class ResourceTemplateDefinition:
    """A resource template a pack serves with a registered resource handler."""

    uri_template: str
    name: str
    handler: str
    description: str = ""
    title: str = ""
    mime_type: str = ""
    completions: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PromptDefinition:
    """A prompt whose messages are Mustache templates (``tools_app.catalog.prompt_messages``),
    or, with ``handler``, produced by a registered ``@prompt_handler``."""

    name: str
    description: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    arguments: list[dict[str, Any]] = field(default_factory=list)
    completions: dict[str, list[str]] = field(default_factory=dict)
    handler: str = ""


@dataclass(frozen=True)
class Pack:
    """Everything one pack offers."""

    tools: list[ToolDefinition] = field(default_factory=list)
    resources: list[ResourceDefinition] = field(default_factory=list)
    templates: list[ResourceTemplateDefinition] = field(default_factory=list)
    prompts: list[PromptDefinition] = field(default_factory=list)
