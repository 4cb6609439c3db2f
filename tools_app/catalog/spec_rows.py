"""Catalog rows (plain SQL tuples) to the hot path's snapshots, each with an estimate of the
memory it holds once cached.

A cold tenant's catalog is built from these without the ORM (``selectors.tenant_catalog``):
model instances were most of its cost. The columns of each kind are listed here, in the order
the builders read them; ``selectors`` turns them into SELECTs.

The estimates are what the catalog cache's byte budget counts. They are cheap (string lengths,
no walk over the decoded JSON) and were calibrated against tracemalloc on CPython 3.11: a
snapshot's fixed cost per kind, plus its text, plus ``JSON_FACTOR`` times its JSON text, plus
the tools/list entry (``wire``) the first listing adds. ``tests/tools_app/test_catalog_cache.py``
checks that they stay within a factor of 1.5 of what tracemalloc measures.

Identical short JSON values are decoded once and shared, and the keys and short strings of
longer ones are interned (``_json``): a tool's memory is mostly its own text.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Generic, TypeVar

from tenants.selectors import aware
from tools_app.catalog.spec import (
    CurationValues,
    PromptSpec,
    ResourceSpec,
    RuleSpec,
    TemplateSpec,
    ToolSpec,
    curated_fields,
)

T = TypeVar("T")

ENTRY_COLUMNS = (
    "id",
    "tenant",
    "name",
    "title",
    "description",
    "icons",
    "tags",
    "backend_kind",
    "backend_config",
    "timeout_seconds",
    "enabled",
    "version",
)
TOOL_COLUMNS = (
    *ENTRY_COLUMNS,
    "input_schema",
    "output_schema",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
    "execution_mode",
    "task_support",
    "confirmation",
    "always_visible",
)
# Followed in a tool's row by its curation's (NULLs when it has none: a LEFT JOIN).
CURATION_COLUMNS = ("name", "title", "description", "arguments", "version")
RESOURCE_COLUMNS = (*ENTRY_COLUMNS, "audience", "priority", "mime_type", "uri", "size", "last_modified")
TEMPLATE_COLUMNS = (*ENTRY_COLUMNS, "audience", "priority", "mime_type", "uri_template", "completions")
PROMPT_COLUMNS = (*ENTRY_COLUMNS, "arguments", "messages", "completions")
# Followed by the id of one API key the rule names (NULL when it names none).
RULE_COLUMNS = (
    "id",
    "effect",
    "kind",
    "tool",
    "tool_pattern",
    "tenant",
    "owner",
    "oauth_subjects",
    "oauth_groups",
    "scopes",
    "confirmation",
    "always_visible",
)

# Measured with tracemalloc over 1,000 tools with unique schemas of 0-16 properties (60-1,400
# characters): a spec instance with its attribute dict, small containers and numbers, before
# any text (shared JSON values such as the backend settings cost it nothing).
SPEC_BYTES = 500
# The tools/list entry a tool keeps once listed (``ToolSpec.wire``: a dict and its small parts).
TOOL_WIRE_BYTES = 200
RULE_BYTES = 900
# A CatalogPart and its five tuples.
PART_BYTES = 400
# Decoded JSON costs about this many bytes of objects per character of JSON text (small dicts,
# lists, long strings; keys and short strings interned): 3.4-3.6 for schemas of 200-1,400.
JSON_FACTOR = 3.5


@dataclass(frozen=True, slots=True)
class Sized(Generic[T]):
    value: T
    nbytes: int


def _json(text: str | None, default: Any) -> tuple[Any, int]:
    """The decoded value and the characters to charge for it (0 when shared, see ``_decoded``)."""
    if text is None:
        return default, 0
    if not isinstance(text, str):  # a database that decodes JSON itself
        return (default if text is None else text), 0
    if len(text) <= SHARED_JSON_MAX_CHARS:
        value = _shared.get(text)
        if value is not None:
            _shared.move_to_end(text)
            return value, 0
        value = json.loads(text)
        _shared[text] = value
        if len(_shared) > SHARED_JSON_ENTRIES:
            _shared.popitem(last=False)
        return (default if value is None else value), len(text)
    return _interned(json.loads(text)), len(text)


# Short JSON values repeat across tools and tenants (``{"handler": "demo.echo"}``, ``[]``,
# ``["tools:read"]``): one decoded value per text, least recently used out past the bound.
# Snapshots never mutate what they hold, so sharing is safe, as sharing a platform tool is.
SHARED_JSON_MAX_CHARS = 96
SHARED_JSON_ENTRIES = 2_048
_shared: OrderedDict[str, Any] = OrderedDict()
# Keys and short values of longer JSON (schemas) are interned: "type", "string", "description"
# are one object each however many schemas hold them (about a third of a small schema's memory).
INTERNED_MAX_CHARS = 32


def _interned(value: Any) -> Any:
    if isinstance(value, dict):
        return {sys.intern(key): _interned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_interned(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERNED_MAX_CHARS:
        return sys.intern(value)
    return value


_NO_NAMES: frozenset[str] = frozenset()


def _frozen(values: Any) -> frozenset[Any]:
    """A frozenset; the one empty one for no values (an empty frozenset is 216 bytes apiece)."""
    return frozenset(values) if values else _NO_NAMES


def _optional_bool(value: object) -> bool | None:
    return None if value is None else bool(value)


@cache
def _annotations(
    read_only: bool | None, destructive: bool | None, idempotent: bool | None, open_world: bool | None
) -> dict[str, bool]:
    """One dict per combination of hints, shared by every tool that has it (no spec mutates it)."""
    pairs = {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": open_world,
    }
    return {key: value for key, value in pairs.items() if value is not None}


def _entry(row: Sequence[Any]) -> tuple[dict[str, Any], int]:
    """The shared fields of a row (its first ``len(ENTRY_COLUMNS)`` columns) and their estimate."""
    pk, tenant_id, name, title, description, icons, tags, backend_kind, backend_config, timeout, enabled, version = row[
        :12
    ]
    icons_value, icons_chars = _json(icons, [])
    tags_value, tags_chars = _json(tags, [])
    config_value, config_chars = _json(backend_config, {})
    fields = {
        "id": pk,
        "tenant_id": tenant_id,
        "name": name,
        "title": title,
        "description": description,
        "icons": icons_value,
        "tags": _frozen(tags_value),
        "backend_kind": backend_kind,
        "backend_config": config_value,
        "timeout_seconds": float(timeout),
        "enabled": bool(enabled),
        "version": version,
    }
    text = len(name) + len(title) + len(description)
    return fields, SPEC_BYTES + text + int(JSON_FACTOR * (icons_chars + tags_chars + config_chars))


def tool(row: Sequence[Any]) -> Sized[ToolSpec]:
    fields, nbytes = _entry(row)
    (
        input_text,
        output_text,
        read_only,
        destructive,
        idempotent,
        open_world,
        mode,
        task_support,
        confirmation,
        pinned,
    ) = row[12 : 12 + len(TOOL_COLUMNS) - len(ENTRY_COLUMNS)]
    input_schema, input_chars = _json(input_text, {})
    output_schema, output_chars = _json(output_text, None)
    fields["source_name"] = fields["name"]
    curation_row = row[len(TOOL_COLUMNS) :]
    if curation_row and curation_row[-1] is not None:  # the curation's version: NULL when none
        name, title, description, arguments_text, curation_version = curation_row
        arguments, arguments_chars = _json(arguments_text, {})
        curation = CurationValues(name, title, description, arguments, curation_version)
        curated = curated_fields(source=fields, input_schema=input_schema, curation=curation)
        input_schema = curated.pop("input_schema")
        fields.update(curated)
        # The curated schema is a copy of the source's with the rules applied.
        nbytes += len(name) + len(title) + len(description) + int(JSON_FACTOR * (arguments_chars + input_chars))
    spec = ToolSpec(
        **fields,
        input_schema=input_schema,
        output_schema=output_schema,
        annotations=_annotations(
            _optional_bool(read_only),
            _optional_bool(destructive),
            _optional_bool(idempotent),
            _optional_bool(open_world),
        ),
        execution_mode=mode,
        task_support=task_support,
        confirmation=confirmation,
        always_visible=bool(pinned),
    )
    return Sized(spec, nbytes + TOOL_WIRE_BYTES + int(JSON_FACTOR * (input_chars + output_chars)))


def _readable(fields: dict[str, Any], audience: Any, priority: float | None, last_modified: datetime | None) -> int:
    """Adds the MIME-free annotations of a resource or template to ``fields``; their estimate."""
    annotations: dict[str, Any] = {}
    audience_value, audience_chars = _json(audience, [])
    if audience_value:
        annotations["audience"] = list(audience_value)
    if priority is not None:
        annotations["priority"] = priority
    if last_modified is not None:
        annotations["lastModified"] = last_modified.isoformat().replace("+00:00", "Z")
    fields["annotations"] = annotations
    return int(JSON_FACTOR * audience_chars)


def resource(row: Sequence[Any]) -> Sized[ResourceSpec]:
    fields, nbytes = _entry(row)
    audience, priority, mime_type, uri, size, last_modified = row[12:]
    nbytes += _readable(fields, audience, priority, aware(last_modified))
    spec = ResourceSpec(**fields, mime_type=mime_type, uri=uri, size=size)
    return Sized(spec, nbytes + len(uri) + len(mime_type))


def template(row: Sequence[Any]) -> Sized[TemplateSpec]:
    fields, nbytes = _entry(row)
    audience, priority, mime_type, uri_template, completions = row[12:]
    nbytes += _readable(fields, audience, priority, None)
    completions_value, completions_chars = _json(completions, {})
    spec = TemplateSpec(**fields, mime_type=mime_type, uri_template=uri_template, completions=completions_value)
    return Sized(spec, nbytes + len(uri_template) + len(mime_type) + int(JSON_FACTOR * completions_chars))


def prompt(row: Sequence[Any]) -> Sized[PromptSpec]:
    fields, nbytes = _entry(row)
    arguments, arguments_chars = _json(row[12], [])
    messages, messages_chars = _json(row[13], [])
    completions, completions_chars = _json(row[14], {})
    spec = PromptSpec(**fields, arguments=arguments, messages=messages, completions=completions)
    return Sized(spec, nbytes + int(JSON_FACTOR * (arguments_chars + messages_chars + completions_chars)))


def rules(rows: Sequence[Sequence[Any]]) -> tuple[Sized[RuleSpec], ...]:
    """Rules from rows of ``RULE_COLUMNS`` plus one key id each (a rule naming n keys has n rows)."""
    keys: dict[int, set[int]] = {}
    first: dict[int, Sequence[Any]] = {}
    for row in rows:
        first.setdefault(row[0], row)
        named = keys.setdefault(row[0], set())
        if row[-1] is not None:
            named.add(row[-1])
    built = []
    for rule_id in sorted(first):
        pk, effect, kind, tool_id, pattern, tenant_id, owner_id, subjects, groups, scopes, confirmation, pinned, _ = (
            first[rule_id]
        )
        subjects_value, subjects_chars = _json(subjects, [])
        groups_value, groups_chars = _json(groups, [])
        scopes_value, scopes_chars = _json(scopes, [])
        spec = RuleSpec(
            id=pk,
            allow=effect == "allow",
            tool_id=tool_id,
            pattern=pattern,
            tenant_id=tenant_id,
            owner_id=owner_id,
            key_ids=_frozen(keys[rule_id]),
            scopes=_frozen(scopes_value),
            kind=kind,
            subjects=_frozen(subjects_value),
            groups=_frozen(groups_value),
            confirmation=confirmation,
            always_visible=bool(pinned),
        )
        json_chars = subjects_chars + groups_chars + scopes_chars
        nbytes = RULE_BYTES + len(pattern) + 60 * len(keys[rule_id]) + int(JSON_FACTOR * json_chars)
        built.append(Sized(spec, nbytes))
    return tuple(built)
