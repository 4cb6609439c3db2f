"""What a tool definition must look like: names, schemas, icons, tags and backend settings."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from tools_app.catalog.models import Tool
from tools_app.catalog.validation import tool_field_errors

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def errors_for(**overrides: Any) -> dict[str, list[str]]:
    fields: dict[str, Any] = {
        "input_schema": {"type": "object"},
        "output_schema": None,
        "icons": [],
        "tags": [],
        "backend_kind": "python",
        "backend_config": {"handler": "demo.echo"},
        "description": "A tool.",
    }
    fields.update(overrides)
    return tool_field_errors(**fields)


def only_error(field: str, **overrides: Any) -> str:
    errors = errors_for(**overrides)
    assert list(errors) == [field], errors
    assert len(errors[field]) == 1
    return errors[field][0]


# --- names --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["echo", "a", "get_time", "demo.echo", "Search-v2", "x" * 128])
def test_valid_tool_names(db: Any, name: str) -> None:
    Tool(name=name, description="d", backend_config={"handler": "demo.echo"}).full_clean()


@pytest.mark.parametrize("name", ["", "x" * 129, "has space", "slash/name", "colon:name", "émoji", "semi;colon"])
def test_invalid_tool_names(db: Any, name: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Tool(name=name, description="d", backend_config={"handler": "demo.echo"}).full_clean()
    assert list(exc.value.message_dict) == ["name"]


# --- input schemas ------------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "additionalProperties": False},
        {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}, "required": ["q"]},
        {
            "$schema": DRAFT_2020_12,
            "type": "object",
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
            "properties": {"at": {"$ref": "#/$defs/point"}},
        },
        {"$schema": DRAFT_07, "type": "object", "properties": {"n": {"type": "integer", "exclusiveMinimum": 0}}},
    ],
    ids=["minimal", "no-arguments", "properties", "2020-12-with-local-ref", "draft-07"],
)
def test_valid_input_schemas(schema: dict[str, Any]) -> None:
    assert errors_for(input_schema=schema) == {}


@pytest.mark.parametrize("schema", [[], "object", 3, None])
def test_input_schema_must_be_a_json_object(schema: Any) -> None:
    assert "inputSchema must be a JSON object" in only_error("input_schema", input_schema=schema)


@pytest.mark.parametrize("schema", [{}, {"type": "array"}, {"type": "string"}])
def test_input_schema_root_must_be_an_object_type(schema: dict[str, Any]) -> None:
    assert 'the root must declare "type": "object"' in only_error("input_schema", input_schema=schema)


def test_bad_keyword_names_the_keyword_and_where() -> None:
    message = only_error("input_schema", input_schema={"type": "object", "properties": {"a": {"type": "strin"}}})
    assert message.startswith("inputSchema: ")
    assert "/properties/a/type" in message
    assert "'strin'" in message


def test_draft_07_rules_apply_when_declared() -> None:
    # In draft-07 exclusiveMinimum is a number; the draft-04 boolean form is a schema error.
    schema = {"$schema": DRAFT_07, "type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": True}}}
    message = only_error("input_schema", input_schema=schema)
    assert "/properties/n/exclusiveMinimum" in message


def test_unknown_dialect_is_refused() -> None:
    message = only_error("input_schema", input_schema={"$schema": "https://example.com/my-dialect", "type": "object"})
    assert "unsupported dialect" in message
    assert "https://example.com/my-dialect" in message


def test_non_string_schema_declaration_is_refused() -> None:
    assert "$schema must be a string" in only_error("input_schema", input_schema={"$schema": 7, "type": "object"})


@pytest.mark.parametrize("ref", ["https://example.com/schemas/point.json", "point.json#/x"])
def test_remote_refs_are_refused(ref: str) -> None:
    message = only_error("input_schema", input_schema={"type": "object", "properties": {"p": {"$ref": ref}}})
    assert "points outside the schema" in message


# --- output schemas -----------------------------------------------------------------


def _with_header(prop: dict[str, Any], header: str = "Region") -> dict[str, Any]:
    return {"type": "object", "properties": {"region": {**prop, "x-mcp-header": header}}}


def test_x_mcp_header_on_a_scalar_is_accepted() -> None:
    assert errors_for(input_schema=_with_header({"type": "string"})) == {}
    nested = {"type": "object", "properties": {"where": _with_header({"type": "integer"}, "Zone")}}
    assert errors_for(input_schema=nested) == {}


@pytest.mark.parametrize(
    ("prop", "header", "expected"),
    [
        ({"type": "array"}, "Region", '"type" string, integer or boolean'),
        ({"type": "string", "x-sensitive": True}, "Region", "cannot be mirrored in a header"),
        ({"type": "string", "writeOnly": True}, "Region", "cannot be mirrored in a header"),
        ({"type": "string"}, "Bad Name", "letters, digits or dashes"),
        ({"type": "string"}, "", "letters, digits or dashes"),
    ],
    ids=["array", "x-sensitive", "writeOnly", "space in name", "empty name"],
)
def test_x_mcp_header_a_client_could_not_mirror_is_refused(prop: dict[str, Any], header: str, expected: str) -> None:
    message = only_error("input_schema", input_schema=_with_header(prop, header))
    assert expected in message and "region" in message


def test_x_mcp_header_names_are_unique_ignoring_case() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "string", "x-mcp-header": "region"},
        },
    }
    assert "is used twice" in only_error("input_schema", input_schema=schema)


def test_output_schema_is_optional() -> None:
    assert errors_for(output_schema=None) == {}
    assert errors_for(output_schema={"type": "object", "properties": {"sum": {"type": "number"}}}) == {}


@pytest.mark.parametrize("schema", [{"type": "array"}, {"type": "number"}, [], {}])
def test_output_schema_must_describe_an_object(schema: Any) -> None:
    assert only_error("output_schema", output_schema=schema).startswith("outputSchema")


# --- icons, tags, description -------------------------------------------------------


@pytest.mark.parametrize(
    "icons",
    [
        [],
        [{"src": "https://example.com/icon.png"}],
        [{"src": "data:image/png;base64,AAAA", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}],
    ],
)
def test_valid_icons(icons: list[dict[str, Any]]) -> None:
    assert errors_for(icons=icons) == {}


@pytest.mark.parametrize(
    ("icons", "expected"),
    [
        ({"src": "https://example.com/i.png"}, "must be a JSON list"),
        ([{"mimeType": "image/png"}], "needs a string 'src'"),
        (["https://example.com/i.png"], "needs a string 'src'"),
        ([{"src": "http://example.com/i.png"}], "https: or data: URI"),
        ([{"src": "https://example.com/i.png", "alt": "x"}], "unknown keys ['alt']"),
        ([{"src": "https://example.com/i.png", "sizes": "48x48"}], "'sizes' must be a list"),
        ([{"src": "https://example.com/i.png", "theme": "blue"}], "'theme' must be 'light' or 'dark'"),
        ([{"src": "https://example.com/i.png", "mimeType": 3}], "'mimeType' must be a string"),
    ],
)
def test_invalid_icons(icons: Any, expected: str) -> None:
    assert expected in only_error("icons", icons=icons)


@pytest.mark.parametrize("tags", ["demo", [""], [1], {"a": 1}])
def test_tags_must_be_a_list_of_strings(tags: Any) -> None:
    assert "Tags must be a JSON list" in only_error("tags", tags=tags)


def test_description_is_required() -> None:
    assert "description is required" in only_error("description", description="   ")


# --- backend settings ---------------------------------------------------------------


def test_unknown_handler_is_refused_with_the_registered_names() -> None:
    message = only_error("backend_config", backend_config={"handler": "os.system"})
    assert "no handler named 'os.system' is registered" in message
    assert "demo.echo" in message


@pytest.mark.parametrize("config", [{}, {"handler": ""}, {"handler": 3}])
def test_python_backend_needs_a_handler(config: dict[str, Any]) -> None:
    assert "needs" in only_error("backend_config", backend_config=config)


def test_backend_config_must_be_an_object() -> None:
    assert "must be a JSON object" in only_error("backend_config", backend_config=["demo.echo"])


def test_unknown_backend_kind_is_refused() -> None:
    assert "unknown backend kind" in only_error("backend_config", backend_kind="shell")


def test_model_clean_reports_every_field(db: Any) -> None:
    tool = Tool(
        name="broken", description="", input_schema={"type": "array"}, icons="x", backend_config={"handler": "nope"}
    )
    with pytest.raises(ValidationError) as exc:
        tool.full_clean()
    assert set(exc.value.message_dict) == {"description", "input_schema", "icons", "backend_config"}


# --- arguments on the call path: jsonschema-rs first, jsonschema for what it refuses ---------

FAST_SCHEMAS: list[tuple[dict[str, Any], list[Any]]] = [
    (
        {
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 2}, "n": {"type": "integer", "maximum": 5}},
            "required": ["text"],
            "additionalProperties": False,
        },
        [
            {"text": "hi"},
            {"text": "h"},
            {"text": "hi", "n": 5},
            {"text": "hi", "n": 6},
            {"text": "hi", "n": 1.0},
            {"text": "hi", "n": True},
            {"text": "hi", "x": 1},
            {},
            {"text": "hi", "n": 10**30},
        ],
    ),
    (
        {"$schema": DRAFT_07, "type": "object", "properties": {"a": {"enum": [1, "b"]}}, "dependencies": {"a": ["b"]}},
        [{"a": 1, "b": 0}, {"a": 1}, {"a": 2, "b": 0}, {"b": 0}],
    ),
    (
        {
            "type": "object",
            "$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "uniqueItems": True}},
            "unevaluatedProperties": False,
        },
        [{"items": [{"id": 1}, {"id": 2}]}, {"items": [{"id": 1}, {"id": 1}]}, {"items": [{}]}, {"other": 1}],
    ),
]


@pytest.mark.parametrize(("schema", "instances"), FAST_SCHEMAS)
def test_the_fast_check_never_accepts_what_jsonschema_refuses(schema: dict[str, Any], instances: list[Any]) -> None:
    from tools_app.catalog.schemas import compile_fast_check, compile_validator, first_error

    fast = compile_fast_check(schema)
    assert fast is not None
    validator = compile_validator(schema)
    for instance in instances:
        valid = first_error(validator, instance) is None
        assert fast(instance) == valid, instance


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}},
        {"type": "object", "properties": {"code": {"type": "string", "pattern": "^\\d+$"}}},
        {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"},
    ],
)
def test_schemas_where_the_libraries_may_differ_get_no_fast_check(schema: dict[str, Any]) -> None:
    from tools_app.catalog.schemas import compile_fast_check

    assert compile_fast_check(schema) is None  # jsonschema alone judges their arguments
