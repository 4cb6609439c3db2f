"""Immutable snapshots of tools, resources, resource templates, prompts and rules, as the MCP
hot path uses them.

Built once per catalog load from model rows; holding them keeps requests free of ORM
objects and database queries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from django.core.exceptions import ObjectDoesNotExist

from audit.redaction import marks_sensitive
from tools_app.catalog.curation import apply_curation, backend_arguments
from tools_app.catalog.schemas import compile_fast_check, compile_validator, mcp_header_params
from tools_app.catalog.uri_templates import UriTemplateMatcher, compile_template

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

    from tools_app.catalog.models import (
        AccessRule,
        CatalogEntry,
        Prompt,
        Resource,
        ResourceTemplate,
        Tool,
        ToolCuration,
    )


class CurationValues(NamedTuple):
    """A tool's curation as the catalog reads it (from a model or a plain SQL row)."""

    name: str
    title: str
    description: str
    arguments: Any
    version: int


def curated_fields(*, source: dict[str, Any], input_schema: dict[str, Any], curation: CurationValues) -> dict[str, Any]:
    """The ToolSpec fields a curation replaces, over the source's name, title and description;
    a rule that no longer fits the source is left out (``apply_curation``, not strict), so
    loading a catalog never fails on a stale curation."""
    applied = apply_curation(input_schema, curation.arguments, strict=False)
    return {
        "name": curation.name or source["name"],
        "title": curation.title or source["title"],
        "description": curation.description or source["description"],
        "input_schema": applied.input_schema,
        "fixed_arguments": applied.fixed,
        "default_arguments": applied.defaults,
        "hidden_arguments": applied.hidden,
        "curation_version": curation.version,
    }


def _curation_of(tool: Tool) -> ToolCuration | None:
    if tool.pk is None:
        return None
    try:
        return tool.curation
    except ObjectDoesNotExist:
        return None


def _listed(value: Any) -> bool:
    """Whether a list entry shows an optional field: never null or empty (a size of 0 shows)."""
    return value is not None and value != "" and value != [] and value != {}


@dataclass(frozen=True, eq=False, kw_only=True)
class EntrySpec:
    """What every kind of entry holds (``CatalogEntry``); each kind adds its own fields, its
    ``from_model`` and the fields its list shows (``wire_fields``)."""

    kind: ClassVar[str]
    # What the list shows even when empty: prompts (and tools) always have a description, which
    # clients show to pick one; resources and templates omit an empty one.
    listed_always: ClassVar[frozenset[str]] = frozenset({"name", "description"})

    id: int
    tenant_id: int | None
    name: str
    title: str
    description: str
    icons: list[dict[str, Any]]
    tags: frozenset[str]
    backend_kind: str
    backend_config: dict[str, Any]
    timeout_seconds: float
    enabled: bool
    version: int

    @staticmethod
    def entry_fields(entry: CatalogEntry) -> dict[str, Any]:
        """The shared fields of a row, for a kind's ``from_model``."""
        return {
            "id": entry.pk,
            "tenant_id": entry.tenant_id,
            "name": entry.name,
            "title": entry.title,
            "description": entry.description,
            "icons": list(entry.icons or []),
            "tags": frozenset(entry.tags or []),
            "backend_kind": entry.backend_kind,
            "backend_config": dict(entry.backend_config or {}),
            "timeout_seconds": float(entry.timeout_seconds),
            "enabled": entry.enabled,
            "version": entry.version,
        }

    @property
    def match_names(self) -> tuple[str, ...]:
        """What a pattern rule's glob is matched against."""
        return (self.name,)

    @property
    def shadow_key(self) -> str:
        """Entries with the same key are one entry to a caller: a private one hides a platform one."""
        return self.name

    def wire_key(self) -> dict[str, Any]:
        """What the list shows before the name (a resource's URI)."""
        return {}

    def wire_fields(self) -> dict[str, Any]:
        """The kind's own fields as its list shows them, after the description."""
        return {}

    @cached_property
    def wire(self) -> dict[str, Any]:
        """The entry exactly as its list (tools/list, resources/list, …) shows it: optional
        fields omitted, never null."""
        data = {
            **self.wire_key(),
            "name": self.name,
            "title": self.title,
            "description": self.description,
            **self.wire_fields(),
            "icons": list(self.icons),
        }
        return {key: value for key, value in data.items() if key in self.listed_always or _listed(value)}


# What an uncurated tool fixes and defaults: one shared empty dict (never changed:
# ``backend_arguments`` builds a new one), not two per tool in every tenant's catalog
# (128 bytes a tool; tenants_bench: 0.0521 MiB per cached tenant of 20 tools, 0.05 the target).
NO_ARGUMENTS: dict[str, Any] = {}


@dataclass(frozen=True, eq=False, kw_only=True)
class ToolSpec(EntrySpec):
    kind: ClassVar[str] = "tool"
    listed_always: ClassVar[frozenset[str]] = frozenset({"name", "description", "inputSchema"})

    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, bool]
    execution_mode: str
    task_support: str
    confirmation: str = "destructive"  # the tool's own policy; rules may tighten it per caller
    # Curation (tools_app.catalog.curation): name, title, description and input_schema above are
    # the published ones; these say what the source called it and what the backend gets besides.
    source_name: str = ""
    fixed_arguments: dict[str, Any] = field(default_factory=lambda: NO_ARGUMENTS)
    default_arguments: dict[str, Any] = field(default_factory=lambda: NO_ARGUMENTS)
    hidden_arguments: frozenset[str] = frozenset()
    curation_version: int = 0  # 0: not curated
    always_visible: bool = False  # listed next to the search tool in search mode

    @classmethod
    def from_model(cls, tool: Tool, *, curated: bool = True) -> ToolSpec:
        """The tool as published: its curation applied (``curated=False``: the source as it is).

        The curation is read from ``tool.curation`` (one query unless the caller used
        ``select_related("curation")``, as the catalog snapshot does)."""
        fields = {
            **cls.entry_fields(tool),
            "input_schema": tool.input_schema,
            "output_schema": tool.output_schema,
            "annotations": tool.annotations(),
            "execution_mode": tool.execution_mode,
            "task_support": tool.task_support,
            "confirmation": tool.confirmation,
            "always_visible": tool.always_visible,
            "source_name": tool.name,
        }
        if curated:
            curation = _curation_of(tool)
            if curation is not None:
                fields.update(cls.curated_fields(tool, curation))
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON values (a background run carries the tool it was accepted for)."""
        data = {spec_field.name: getattr(self, spec_field.name) for spec_field in dataclass_fields(self)}
        data["tags"], data["hidden_arguments"] = sorted(self.tags), sorted(self.hidden_arguments)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolSpec:
        return cls(**{**data, "tags": frozenset(data["tags"]), "hidden_arguments": frozenset(data["hidden_arguments"])})

    @staticmethod
    def curated_fields(tool: Tool, curation: ToolCuration) -> dict[str, Any]:
        """The fields ``curation`` replaces (see ``curated_fields``)."""
        values = CurationValues(
            curation.name, curation.title, curation.description, curation.arguments, curation.version
        )
        source = {"name": tool.name, "title": tool.title, "description": tool.description}
        return curated_fields(source=source, input_schema=tool.input_schema, curation=values)

    @property
    def match_names(self) -> tuple[str, ...]:
        """A pattern rule matches the published name or the source's: renaming a tool never
        takes it out of a deny rule written for its source name."""
        if self.source_name and self.source_name != self.name:
            return (self.name, self.source_name)
        return (self.name,)

    @property
    def revision(self) -> str:
        """What moves when what clients see of the tool moves: its row or its curation."""
        return f"{self.version}.{self.curation_version}"

    def backend_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """What the backend receives for a client's validated arguments (hidden ones dropped,
        defaults filled in, fixed values set)."""
        return backend_arguments(
            arguments, fixed=self.fixed_arguments, defaults=self.default_arguments, hidden=self.hidden_arguments
        )

    def wire_fields(self) -> dict[str, Any]:
        forbidden = self.task_support == "forbidden"
        return {
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            # Shared, as the schemas are: a copy per listed tool cost 200 bytes for nothing.
            "annotations": self.annotations,
            "execution": None if forbidden else {"taskSupport": self.task_support},
        }

    @cached_property
    def header_params(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Arguments clients mirror in ``Mcp-Param-<Name>`` (``x-mcp-header``): (Name, path)."""
        return tuple(mcp_header_params(self.input_schema))

    @cached_property
    def input_validator(self) -> Validator:
        return compile_validator(self.input_schema)

    @cached_property
    def redacted_schema(self) -> dict[str, Any] | None:
        """The input schema when it marks arguments sensitive (the audit row redacts them),
        else None: the row takes the arguments as they are, without a copy."""
        return self.input_schema if marks_sensitive(self.input_schema) else None

    @cached_property
    def input_fast_check(self) -> Callable[[Any], bool] | None:
        """True for arguments surely valid (``compile_fast_check``); None: no fast check."""
        return compile_fast_check(self.input_schema)

    @cached_property
    def output_validator(self) -> Validator | None:
        return compile_validator(self.output_schema) if self.output_schema is not None else None

    @cached_property
    def output_fast_check(self) -> Callable[[Any], bool] | None:
        return compile_fast_check(self.output_schema) if self.output_schema is not None else None


@dataclass(frozen=True, eq=False, kw_only=True)
class _ReadableSpec(EntrySpec):
    """What resources and resource templates share: a MIME type, annotations, and no description
    in the list unless there is one."""

    kind: ClassVar[str] = "resource"
    listed_always: ClassVar[frozenset[str]] = frozenset({"name"})

    mime_type: str
    annotations: dict[str, Any]

    @staticmethod
    def readable_fields(entry: Resource | ResourceTemplate, last_modified: datetime | None = None) -> dict[str, Any]:
        annotations: dict[str, Any] = {}
        if entry.audience:
            annotations["audience"] = list(entry.audience)
        if entry.priority is not None:
            annotations["priority"] = entry.priority
        if last_modified is not None:
            annotations["lastModified"] = last_modified.isoformat().replace("+00:00", "Z")
        return {**EntrySpec.entry_fields(entry), "mime_type": entry.mime_type, "annotations": annotations}

    def wire_fields(self) -> dict[str, Any]:
        return {"mimeType": self.mime_type, "annotations": dict(self.annotations)}


@dataclass(frozen=True, eq=False, kw_only=True)
class ResourceSpec(_ReadableSpec):
    """A resource at a fixed URI; static content is not held here (see ``cache.ContentCache``)."""

    uri: str
    size: int | None

    @classmethod
    def from_model(cls, resource: Resource) -> ResourceSpec:
        return cls(**cls.readable_fields(resource, resource.last_modified), uri=resource.uri, size=resource.size)

    @property
    def match_names(self) -> tuple[str, ...]:
        return (self.name, self.uri)

    @property
    def shadow_key(self) -> str:
        return self.uri

    @property
    def is_static(self) -> bool:
        return self.backend_kind == "static"

    def wire_key(self) -> dict[str, Any]:
        return {"uri": self.uri}

    def wire_fields(self) -> dict[str, Any]:
        return {**super().wire_fields(), "size": self.size}


@dataclass(frozen=True, eq=False, kw_only=True)
class TemplateSpec(_ReadableSpec):
    uri_template: str
    completions: dict[str, list[str]]

    @classmethod
    def from_model(cls, template: ResourceTemplate) -> TemplateSpec:
        completions = dict(template.completions or {})
        return cls(**cls.readable_fields(template), uri_template=template.uri_template, completions=completions)

    @property
    def match_names(self) -> tuple[str, ...]:
        return (self.name, self.uri_template)

    @cached_property
    def matcher(self) -> UriTemplateMatcher:
        return compile_template(self.uri_template)

    def wire_key(self) -> dict[str, Any]:
        return {"uriTemplate": self.uri_template}


@dataclass(frozen=True, eq=False, kw_only=True)
class PromptSpec(EntrySpec):
    kind: ClassVar[str] = "prompt"

    arguments: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    completions: dict[str, list[str]]

    @classmethod
    def from_model(cls, prompt: Prompt) -> PromptSpec:
        return cls(
            **cls.entry_fields(prompt),
            arguments=list(prompt.arguments or []),
            messages=list(prompt.messages or []),
            completions=dict(prompt.completions or {}),
        )

    @property
    def required_arguments(self) -> list[str]:
        return [argument["name"] for argument in self.arguments if argument.get("required")]

    def wire_fields(self) -> dict[str, Any]:
        return {
            "arguments": [
                {key: argument[key] for key in ("name", "title", "description", "required") if key in argument}
                for argument in self.arguments
            ]
        }


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
    always_visible: bool = False  # an allow rule whose tools search mode lists

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
            always_visible=rule.always_visible,
        )
