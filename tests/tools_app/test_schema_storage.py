"""Tool schemas come back exactly as written, key order included (jsonb would reorder them)."""

from __future__ import annotations

import json

from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec

SCHEMA_TEXT = """{"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"},
 "middle": {"type": "boolean"}}, "required": ["zeta"], "$defs": {"b": {"type": "string"}, "a": {"type": "string"}},
 "additionalProperties": false}"""


def test_schema_key_order_survives_the_database(db, make_tool):
    schema = json.loads(SCHEMA_TEXT)
    tool = make_tool("ordered", input_schema=schema, output_schema={"type": "object", "properties": {"z": {}, "a": {}}})
    stored = Tool.objects.get(pk=tool.pk)
    assert list(stored.input_schema) == ["type", "properties", "required", "$defs", "additionalProperties"]
    assert list(stored.input_schema["properties"]) == ["zeta", "alpha", "middle"]
    assert list(stored.output_schema["properties"]) == ["z", "a"]
    wire = ToolSpec.from_model(stored).wire
    assert json.dumps(wire["inputSchema"]) == json.dumps(schema)


def test_no_output_schema_is_null(db, make_tool):
    assert Tool.objects.get(pk=make_tool("plain").pk).output_schema is None
