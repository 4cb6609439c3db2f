"""Immutable snapshots of tools and rules, as the MCP hot path uses them.

Built once per catalog load from model rows; holding them keeps requests free of ORM
objects and database queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tools_app.catalog.schemas import compile_validator

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from tools_app.catalog.models import AccessRule, Tool


@dataclass(frozen=True, eq=False)
class ToolSpec:
    id: int
    tenant_id: int | None
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, bool]
    icons: list[dict[str, Any]]
    tags: frozenset[str]
    backend_kind: str
    backend_config: dict[str, Any]
    execution_mode: str
    task_support: str
    timeout_seconds: float
    enabled: bool
    version: int

    @classmethod
    def from_model(cls, tool: Tool) -> ToolSpec:
        return cls(
            id=tool.pk,
            tenant_id=tool.tenant_id,
            name=tool.name,
            title=tool.title,
            description=tool.description,
            input_schema=tool.input_schema,
            output_schema=tool.output_schema,
            annotations=tool.annotations(),
            icons=list(tool.icons or []),
            tags=frozenset(tool.tags or []),
            backend_kind=tool.backend_kind,
            backend_config=dict(tool.backend_config or {}),
            execution_mode=tool.execution_mode,
            task_support=tool.task_support,
            timeout_seconds=float(tool.timeout_seconds),
            enabled=tool.enabled,
            version=tool.version,
        )

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The tool exactly as `tools/list` shows it: optional fields omitted, never null."""
        data: dict[str, Any] = {"name": self.name}
        if self.title:
            data["title"] = self.title
        data["description"] = self.description
        data["inputSchema"] = self.input_schema
        if self.output_schema is not None:
            data["outputSchema"] = self.output_schema
        if self.annotations:
            data["annotations"] = dict(self.annotations)
        if self.icons:
            data["icons"] = list(self.icons)
        if self.task_support != "forbidden":
            data["execution"] = {"taskSupport": self.task_support}
        return data

    @cached_property
    def input_validator(self) -> Validator:
        return compile_validator(self.input_schema)

    @cached_property
    def output_validator(self) -> Validator | None:
        return compile_validator(self.output_schema) if self.output_schema is not None else None


@dataclass(frozen=True)
class RuleSpec:
    id: int
    allow: bool
    tool_id: int | None
    pattern: str
    tenant_id: int | None
    owner_id: int | None
    key_ids: frozenset[int] = field(default_factory=frozenset)
    scopes: frozenset[str] = field(default_factory=frozenset)
    subjects: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)

    @property
    def narrowed(self) -> bool:
        """Whether the rule names credentials (keys, OAuth subjects or groups)."""
        return bool(self.key_ids or self.subjects or self.groups)

    @classmethod
    def from_model(cls, rule: AccessRule, key_ids: frozenset[int]) -> RuleSpec:
        return cls(
            id=rule.pk,
            allow=rule.effect == "allow",
            tool_id=rule.tool_id,
            pattern=rule.tool_pattern,
            tenant_id=rule.tenant_id,
            owner_id=rule.owner_id,
            key_ids=key_ids,
            scopes=frozenset(rule.scopes or []),
            subjects=frozenset(rule.oauth_subjects or []),
            groups=frozenset(rule.oauth_groups or []),
        )
