"""Definitions in code: the tools, resources, templates and prompts a pack offers and
``seed_demo`` installs as catalog rows (``catalog_entry_install``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class EntryDefinition:
    """What every definition has; ``row_fields`` are the catalog row's field values."""

    name: str
    description: str = ""
    title: str = ""

    def row_fields(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "description": self.description}


@dataclass(frozen=True, kw_only=True)
class ToolDefinition(EntryDefinition):
    """A tool a pack offers, run by a registered python handler."""

    handler: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object", "additionalProperties": False})
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, bool] = field(default_factory=dict)
    timeout_seconds: float = 30.0
    execution_mode: str = "inline"
    task_support: str = "forbidden"
    # The model's default: the user confirms unless the annotations say read-only or harmless.
    confirmation: str = "destructive"

    def row_fields(self) -> dict[str, Any]:
        return {
            **super().row_fields(),
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "read_only_hint": self.annotations.get("readOnlyHint"),
            "destructive_hint": self.annotations.get("destructiveHint"),
            "idempotent_hint": self.annotations.get("idempotentHint"),
            "open_world_hint": self.annotations.get("openWorldHint"),
            "backend_kind": "python",
            "backend_config": {"handler": self.handler},
            "execution_mode": self.execution_mode,
            "task_support": self.task_support,
            "timeout_seconds": self.timeout_seconds,
            "confirmation": self.confirmation,
        }


@dataclass(frozen=True, kw_only=True)
class ResourceDefinition(EntryDefinition):
    """A static resource a pack offers (``text``, or ``blob`` for binary content)."""

    uri: str
    mime_type: str = "text/plain"
    text: str = ""
    blob: bytes | None = None

    def row_fields(self) -> dict[str, Any]:
        return {
            **super().row_fields(),
            "uri": self.uri,
            "mime_type": self.mime_type,
            "text": self.text,
            "blob": self.blob,
        }


@dataclass(frozen=True, kw_only=True)
class ResourceTemplateDefinition(EntryDefinition):
    """A resource template a pack serves with a registered resource handler."""

    uri_template: str
    handler: str
    mime_type: str = ""
    completions: dict[str, list[str]] = field(default_factory=dict)

    def row_fields(self) -> dict[str, Any]:
        return {
            **super().row_fields(),
            "uri_template": self.uri_template,
            "mime_type": self.mime_type,
            "backend_kind": "python",
            "backend_config": {"handler": self.handler},
            "completions": self.completions,
        }


@dataclass(frozen=True, kw_only=True)
class PromptDefinition(EntryDefinition):
    """A prompt whose messages are Mustache templates (``tools_app.catalog.prompt_messages``),
    or, with ``handler``, produced by a registered ``@prompt_handler``."""

    description: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    arguments: list[dict[str, Any]] = field(default_factory=list)
    completions: dict[str, list[str]] = field(default_factory=dict)
    handler: str = ""

    def row_fields(self) -> dict[str, Any]:
        backend = {"backend_kind": "python", "backend_config": {"handler": self.handler}}
        return {
            **super().row_fields(),
            "arguments": self.arguments,
            "messages": self.messages,
            "completions": self.completions,
            **(backend if self.handler else {"backend_kind": "template", "backend_config": {}}),
        }


@dataclass(frozen=True)
class Pack:
    """Everything one pack offers."""

    tools: list[ToolDefinition] = field(default_factory=list)
    resources: list[ResourceDefinition] = field(default_factory=list)
    templates: list[ResourceTemplateDefinition] = field(default_factory=list)
    prompts: list[PromptDefinition] = field(default_factory=list)

    def entries(self) -> list[EntryDefinition]:
        """Every definition, in install order (tools, resources, templates, prompts)."""
        return [*self.tools, *self.resources, *self.templates, *self.prompts]
