"""JSON Schema checks for tool definitions and arguments.

Schemas are stored verbatim (``$schema``, ``$defs``, ``$ref``, ``additionalProperties``
and every other keyword survive untouched). A schema without ``$schema`` is JSON Schema
2020-12; a declared ``$schema`` selects that draft, and an unknown one is refused.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import jsonschema
import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as JsonSchemaValidationError
from jsonschema.protocols import Validator


class SchemaProblem(ValueError):
    """A schema is unusable; the message says which keyword and where, for a human."""


def _pointer(path: Any) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else "/ (the root)"


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    declared = schema.get("$schema")
    if declared is None:
        return Draft202012Validator
    if not isinstance(declared, str):
        raise SchemaProblem("$schema must be a string naming a JSON Schema draft")
    # default=None: an unknown $schema gives None (no silent fallback, no DeprecationWarning).
    cls: type[Validator] | None = jsonschema.validators.validator_for(schema, default=cast("type[Validator]", None))
    if cls is None:
        raise SchemaProblem(
            f"$schema names an unsupported dialect {declared!r}; use JSON Schema 2020-12 "
            "(the default when $schema is omitted), 2019-09, draft-07, draft-06 or draft-04"
        )
    return cls


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key == "patternProperties" and isinstance(value, dict):
                yield from value
            yield from _patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item)


def is_regex(pattern: str) -> bool:
    """True when Python's ``re`` compiles ``pattern`` (what jsonschema's "regex" format checks)."""
    try:
        with warnings.catch_warnings():  # "possible nested set" and the like: still a regex
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except (re.error, OverflowError, RecursionError):
        return False
    return True


def quickly_valid(schema: Any) -> bool:
    """True when ``schema`` surely passes Draft202012Validator.check_schema; False: ask it.

    jsonschema-rs checks against the metaschema about a hundred times faster (an OpenAPI import
    of GitHub's 1,223 operations spent 55 s in check_schema); it skips the "regex" format, so
    patterns are compiled here as jsonschema's format check does.
    """
    return bool(jsonschema_rs.meta.is_valid(schema)) and all(is_regex(pattern) for pattern in _patterns(schema))


def check_object_schema(schema: Any, *, label: str) -> None:
    """Raise SchemaProblem unless ``schema`` is a valid JSON Schema describing an object.

    ``label`` ("inputSchema", "outputSchema") starts every message so the admin and the
    API can show it as is.
    """
    if not isinstance(schema, dict):
        raise SchemaProblem(f"{label} must be a JSON object (a schema), not {type(schema).__name__}")
    try:
        cls = _validator_class(schema)
    except SchemaProblem as exc:
        raise SchemaProblem(f"{label}: {exc}") from None
    try:
        if not (cls is Draft202012Validator and quickly_valid(schema)):
            cls.check_schema(schema)
    except SchemaError as exc:
        raise SchemaProblem(
            f"{label}: at {_pointer(exc.path)} the keyword {exc.validator!r} is violated: {exc.message}"
        ) from None
    if schema.get("type") != "object":
        raise SchemaProblem(f'{label}: the root must declare "type": "object" (tools take and return objects)')
    properties = schema.get("properties", {})
    for name, sub in properties.items():
        if not isinstance(sub, dict):
            raise SchemaProblem(f"{label}: at /properties/{name} each property must be a schema object")
    for ref in _refs(schema):
        if not ref.startswith("#"):
            raise SchemaProblem(
                f"{label}: $ref {ref!r} points outside the schema; only local references (#/...) are "
                "allowed, Toolbay never fetches schemas over the network"
            )
    check_mcp_headers(schema, label=label)


def compile_validator(schema: dict[str, Any]) -> Validator:
    """A reusable validator for an already-checked schema (compile once, validate many)."""
    cls = _validator_class(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# The drafts jsonschema-rs implements, by the Python validator class that stands for them.
_RUST_DRAFTS: dict[type[Any], type[Any]] = {
    jsonschema.Draft4Validator: jsonschema_rs.Draft4Validator,
    jsonschema.Draft6Validator: jsonschema_rs.Draft6Validator,
    jsonschema.Draft7Validator: jsonschema_rs.Draft7Validator,
    jsonschema.Draft201909Validator: jsonschema_rs.Draft201909Validator,
    Draft202012Validator: jsonschema_rs.Draft202012Validator,
}


def _uses_dialect_keywords(node: Any) -> bool:
    """Whether a schema has keywords where jsonschema and jsonschema-rs may disagree:
    ``format`` (each checks its own list) and regular expressions (``pattern``,
    ``patternProperties``: Python's ``re`` and Rust's regex differ at the edges). A property
    that happens to be named so (a schema object, not a string) counts too: harmless."""
    if isinstance(node, dict):
        if isinstance(node.get("format"), str) or isinstance(node.get("pattern"), str) or "patternProperties" in node:
            return True
        return any(_uses_dialect_keywords(value) for value in node.values())
    if isinstance(node, list):
        return any(_uses_dialect_keywords(item) for item in node)
    return False


def compile_fast_check(schema: dict[str, Any]) -> Callable[[Any], bool] | None:
    """A check that says True only for instances the schema accepts, for the call path.

    jsonschema validates a small argument object in ~35 µs of Python, jsonschema-rs in
    under 1 µs: a tools/call asks it first and asks jsonschema (for the error message, and
    its verdict) only when it says no. So jsonschema-rs may only be wrong towards "no":
    schemas with keywords where the two could disagree (``format``, regular expressions)
    and drafts it does not implement get None (jsonschema alone). Never raises.
    """
    try:
        rust_class = _RUST_DRAFTS.get(_validator_class(schema))
        if rust_class is None or _uses_dialect_keywords(schema):
            return None
        is_valid: Callable[[Any], bool] = rust_class(schema).is_valid
    except Exception:  # a schema it cannot compile: jsonschema alone judges
        return None

    def check(instance: Any) -> bool:
        try:
            return bool(is_valid(instance))
        except Exception:  # a value it cannot convert (a huge integer, say): ask jsonschema
            return False

    return check


def describe_error(error: JsonSchemaValidationError, *, subject: str) -> str:
    """One actionable sentence naming the field and the rule that failed."""
    where = "/".join(str(p) for p in error.absolute_path)
    field = f"'{where}'" if where else "the arguments object"
    return f"Invalid {subject}: {field} failed rule '{error.validator}': {error.message}"


def first_error(validator: Validator, instance: Any) -> JsonSchemaValidationError | None:
    """The most relevant validation error (jsonschema's own ranking), or None when valid."""
    if validator.is_valid(instance):  # the common case; ranking errors costs a lot more
        return None
    best: JsonSchemaValidationError | None = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    return best


MCP_HEADER = "x-mcp-header"
HEADER_SCALARS = ("string", "integer", "boolean")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def mcp_header_params(schema: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(header Name, property path) for every ``x-mcp-header`` reachable through plain
    ``properties`` chains from the schema's root (2026-07-28 §transport)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        if isinstance(prop.get(MCP_HEADER), str):
            yield prop[MCP_HEADER], (*path, name)
        yield from mcp_header_params(prop, (*path, name))


def check_mcp_headers(schema: Any, *, label: str) -> None:
    """Raise SchemaProblem for an ``x-mcp-header`` a client could not mirror or must not see:
    only on string, integer or boolean properties, never on sensitive ones (``x-sensitive``,
    ``writeOnly``: a header is logged by every proxy), names of letters, digits and dashes,
    each name once."""
    seen: set[str] = set()
    for header, path in mcp_header_params(schema):
        where = f"{label} property {'.'.join(path)}"
        prop: Any = schema
        for step in path:
            prop = prop["properties"][step]
        if not _HEADER_NAME.match(header):
            raise SchemaProblem(f"{where}: x-mcp-header must be 1-64 letters, digits or dashes, got {header!r}")
        if header.lower() in seen:
            raise SchemaProblem(f"{where}: x-mcp-header {header!r} is used twice")
        seen.add(header.lower())
        if prop.get("type") not in HEADER_SCALARS:
            raise SchemaProblem(f'{where}: x-mcp-header needs "type" string, integer or boolean')
        if prop.get("x-sensitive") is True or prop.get("writeOnly") is True:
            raise SchemaProblem(
                f"{where}: a sensitive property (x-sensitive / writeOnly) cannot be mirrored in a header"
            )
