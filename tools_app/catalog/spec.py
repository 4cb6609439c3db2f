"""Immutable snapshots of tools, resources, resource templates, prompts and rules, as the MCP
hot path uses them.

Built once per catalog load from model rows; holding them keeps requests free of ORM
objects and database queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from tools_app.catalog.schemas import compile_validator, mcp_header_params
from tools_app.catalog.uri_templates import UriTemplateMatcher, compile_template

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool


@dataclass(frozen=True, eq=False)
class ToolSpec:
    kind: ClassVar[str] = "tool"

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
    confirmation: str = "destructive"  # the tool's own policy; rules may tighten it per caller

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
            confirmation=tool.confirmation,
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

    @property
    def match_names(self) -> tuple[str, ...]:
        """What a pattern rule's glob is matched against."""
        return (self.name,)

    @property
    def shadow_key(self) -> str:
        """Entries with the same key are one entry to a caller: a private one hides a platform one."""
        return self.name

    @cached_property
    def header_params(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Arguments clients mirror in ``Mcp-Param-<Name>`` (``x-mcp-header``): (Name, path)."""
        return tuple(mcp_header_params(self.input_schema))

    @cached_property
    def input_validator(self) -> Validator:
        return compile_validator(self.input_schema)

    @cached_property
    def output_validator(self) -> Validator | None:
        return compile_validator(self.output_schema) if self.output_schema is not None else None


def _annotations(audience: list[str], priority: float | None, last_modified: datetime | None) -> dict[str, Any]:
    annotations: dict[str, Any] = {}
    if audience:
        annotations["audience"] = list(audience)
    if priority is not None:
        annotations["priority"] = priority
    if last_modified is not None:
        annotations["lastModified"] = last_modified.isoformat().replace("+00:00", "Z")
    return annotations


@dataclass(frozen=True, eq=False)
class ResourceSpec:
    """A resource at a fixed URI; static content is not held here (see ``cache.ContentCache``)."""

    kind: ClassVar[str] = "resource"

    id: int
    tenant_id: int | None
    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    size: int | None
    annotations: dict[str, Any]
    icons: list[dict[str, Any]]
    tags: frozenset[str]
    backend_kind: str
    backend_config: dict[str, Any]
    timeout_seconds: float
    enabled: bool
    version: int

    @classmethod
    def from_model(cls, resource: Resource) -> ResourceSpec:
        return cls(
            id=resource.pk,
            tenant_id=resource.tenant_id,
            uri=resource.uri,
            name=resource.name,
            title=resource.title,
            description=resource.description,
            mime_type=resource.mime_type,
            size=resource.size,
            annotations=_annotations(resource.audience, resource.priority, resource.last_modified),
            icons=list(resource.icons or []),
            tags=frozenset(resource.tags or []),
            backend_kind=resource.backend_kind,
            backend_config=dict(resource.backend_config or {}),
            timeout_seconds=float(resource.timeout_seconds),
            enabled=resource.enabled,
            version=resource.version,
        )

    @property
    def match_names(self) -> tuple[str, ...]:
        return (self.name, self.uri)

    @property
    def shadow_key(self) -> str:
        return self.uri

    @property
    def is_static(self) -> bool:
        return self.backend_kind == "static"

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The resource as resources/list shows it (optional fields omitted, never null)."""
        data: dict[str, Any] = {"uri": self.uri, "name": self.name}
        if self.title:
            data["title"] = self.title
        if self.description:
            data["description"] = self.description
        if self.mime_type:
            data["mimeType"] = self.mime_type
        if self.size is not None:
            data["size"] = self.size
        if self.icons:
            data["icons"] = list(self.icons)
        if self.annotations:
            data["annotations"] = dict(self.annotations)
        return data


@dataclass(frozen=True, eq=False)
class TemplateSpec:
    kind: ClassVar[str] = "resource"

    id: int
    tenant_id: int | None
    uri_template: str
    name: str
    title: str
    description: str
    mime_type: str
    annotations: dict[str, Any]
    icons: list[dict[str, Any]]
    tags: frozenset[str]
    backend_kind: str
    backend_config: dict[str, Any]
    completions: dict[str, list[str]]
    timeout_seconds: float
    enabled: bool
    version: int

    @classmethod
    def from_model(cls, template: ResourceTemplate) -> TemplateSpec:
        return cls(
            id=template.pk,
            tenant_id=template.tenant_id,
            uri_template=template.uri_template,
            name=template.name,
            title=template.title,
            description=template.description,
            mime_type=template.mime_type,
            annotations=_annotations(template.audience, template.priority, None),
            icons=list(template.icons or []),
            tags=frozenset(template.tags or []),
            backend_kind=template.backend_kind,
            backend_config=dict(template.backend_config or {}),
            completions=dict(template.completions or {}),
            timeout_seconds=float(template.timeout_seconds),
            enabled=template.enabled,
            version=template.version,
        )

    @property
    def match_names(self) -> tuple[str, ...]:
        return (self.name, self.uri_template)

    @property
    def shadow_key(self) -> str:
        return self.name

    @cached_property
    def matcher(self) -> UriTemplateMatcher:
        return compile_template(self.uri_template)

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The template as resources/templates/list shows it."""
        data: dict[str, Any] = {"uriTemplate": self.uri_template, "name": self.name}
        if self.title:
            data["title"] = self.title
        if self.description:
            data["description"] = self.description
        if self.mime_type:
            data["mimeType"] = self.mime_type
        if self.icons:
            data["icons"] = list(self.icons)
        if self.annotations:
            data["annotations"] = dict(self.annotations)
        return data


@dataclass(frozen=True, eq=False)
class PromptSpec:
    kind: ClassVar[str] = "prompt"

    id: int
    tenant_id: int | None
    name: str
    title: str
    description: str
    arguments: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    icons: list[dict[str, Any]]
    tags: frozenset[str]
    backend_kind: str
    backend_config: dict[str, Any]
    completions: dict[str, list[str]]
    timeout_seconds: float
    enabled: bool
    version: int

    @classmethod
    def from_model(cls, prompt: Prompt) -> PromptSpec:
        return cls(
            id=prompt.pk,
            tenant_id=prompt.tenant_id,
            name=prompt.name,
            title=prompt.title,
            description=prompt.description,
            arguments=list(prompt.arguments or []),
            messages=list(prompt.messages or []),
            icons=list(prompt.icons or []),
            tags=frozenset(prompt.tags or []),
            backend_kind=prompt.backend_kind,
            backend_config=dict(prompt.backend_config or {}),
            completions=dict(prompt.completions or {}),
            timeout_seconds=float(prompt.timeout_seconds),
            enabled=prompt.enabled,
            version=prompt.version,
        )

    @property
    def match_names(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def shadow_key(self) -> str:
        return self.name

    @property
    def required_arguments(self) -> list[str]:
        return [argument["name"] for argument in self.arguments if argument.get("required")]

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The prompt as prompts/list shows it."""
        data: dict[str, Any] = {"name": self.name}
        if self.title:
            data["title"] = self.title
        data["description"] = self.description
        if self.arguments:
            data["arguments"] = [
                {key: argument[key] for key in ("name", "title", "description", "required") if key in argument}
                for argument in self.arguments
            ]
        if self.icons:
            data["icons"] = list(self.icons)
        return data


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
    kind: str = "tool"  # what a pattern matches: tool, resource, prompt or any
    subjects: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    confirmation: str = ""  # a stricter confirmation policy for the callers it applies to

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
            kind=rule.kind,
            subjects=frozenset(rule.oauth_subjects or []),
            groups=frozenset(rule.oauth_groups or []),
            confirmation=rule.confirmation,
        )
