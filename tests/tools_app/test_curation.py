"""Curation of what the model sees: overrides, hidden and preset arguments, narrowing (never
widening), and what the snapshot and the call path make of them."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from tenants.principal import Principal
from tools_app.catalog.cache import TenantTools
from tools_app.catalog.curation import apply_curation
from tools_app.catalog.models import Tool, ToolCuration
from tools_app.catalog.selectors import catalog_snapshot
from tools_app.catalog.services import catalog_entry_create, catalog_entry_update, tool_curate, tool_curation_delete
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.execution import argument_problem
from tools_app.runs.trial_calls import tool_test_call

SOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "account": {"type": "string", "description": "Account id"},
        "status": {"type": "string", "enum": ["open", "closed", "spam"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        "query": {"type": "string", "maxLength": 200, "pattern": "^[a-z ]*$"},
        "debug": {"type": "boolean"},
        "page": {"$ref": "#/$defs/page"},
    },
    "required": ["account", "query"],
    "$defs": {"page": {"type": "integer", "minimum": 0}},
}


@pytest.fixture
def crm(make_tool) -> Tool:
    return make_tool(
        "crm_search",
        title="Search",
        description="Searches the CRM (for humans).",
        input_schema=SOURCE_SCHEMA,
        handler="testing.arguments",
    )


def principal(tenant) -> Principal:
    return Principal(
        tenant_id=tenant.pk, tenant_slug=tenant.slug, key_id=None, key_name="test", key_prefix="", scopes=frozenset()
    )


def published(tenant, name: str) -> ToolSpec | None:
    snapshot = catalog_snapshot(tenant.pk)
    return (
        TenantTools.of(None, snapshot)  # type: ignore[arg-type]
        .visible(principal(tenant))
        .by_name.get(name)
    )


def test_overrides_name_title_description_and_routes_the_new_name(acme, crm, grant) -> None:
    grant(acme, crm)
    tool_curate(tool=crm, fields={"name": "find_customers", "title": "Find customers", "description": "For models."})
    assert published(acme, "crm_search") is None
    spec = published(acme, "find_customers")
    assert spec is not None and spec.id == crm.pk
    assert (spec.wire["name"], spec.wire["title"], spec.wire["description"]) == (
        "find_customers",
        "Find customers",
        "For models.",
    )
    assert spec.source_name == "crm_search"
    # The row keeps its source definition.
    crm.refresh_from_db()
    assert (crm.name, crm.title, crm.description) == ("crm_search", "Search", "Searches the CRM (for humans).")


def test_hidden_fixed_and_default_arguments(acme, crm, grant) -> None:
    grant(acme, crm)
    tool_curate(
        tool=crm,
        fields={
            "arguments": {
                "account": {"hidden": True, "value": "acme-42"},
                "debug": {"hidden": True},
                "limit": {"default": 20, "maximum": 50, "description": "How many (at most 50)."},
            }
        },
    )
    spec = published(acme, "crm_search")
    assert spec is not None
    schema = spec.wire["inputSchema"]
    assert set(schema["properties"]) == {"status", "limit", "query", "page"}
    assert schema["required"] == ["query"]  # account is no longer the client's to give
    assert schema["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "default": 20,
        "description": "How many (at most 50).",
    }
    # The client's call is checked against the published schema...
    assert argument_problem(spec, {"query": "acme", "limit": 51}) is not None
    assert argument_problem(spec, {"query": "acme"}) is None
    # ...and the backend gets the source's shape: fixed value set, default filled, hidden dropped.
    assert spec.backend_arguments({"query": "acme", "debug": True, "account": "evil"}) == {
        "query": "acme",
        "limit": 20,
        "account": "acme-42",
    }
    assert spec.backend_arguments({"query": "x", "limit": 3})["limit"] == 3


def test_narrowing_enum_bounds_length_and_pattern(acme, crm, grant) -> None:
    grant(acme, crm)
    tool_curate(
        tool=crm,
        fields={
            "arguments": {
                "status": {"enum": ["open"]},
                "limit": {"minimum": 5, "maximum": 10},
                "query": {"maxLength": 20, "minLength": 2, "pattern": "^[a-z]"},
                "page": {"maximum": 9},
            }
        },
    )
    spec = published(acme, "crm_search")
    assert spec is not None
    props = spec.input_schema["properties"]
    assert props["status"]["enum"] == ["open"]
    assert props["query"]["pattern"] == "^[a-z ]*$" and props["query"]["allOf"] == [{"pattern": "^[a-z]"}]
    good = {"account": "a", "query": "abc", "status": "open", "limit": 5, "page": 9}
    assert argument_problem(spec, good) is None
    for bad in ({"status": "closed"}, {"limit": 11}, {"limit": 4}, {"query": "a" * 21}, {"query": " a"}, {"page": 10}):
        assert argument_problem(spec, {**good, **bad}) is not None, bad


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"status": {"enum": ["open", "deleted"]}}, "'deleted' is not one of the source's values"),
        ({"limit": {"maximum": 500}}, "would widen the source's upper bound 100"),
        ({"limit": {"minimum": 0}}, "would widen the source's lower bound 1"),
        ({"query": {"maxLength": 300}}, "would widen the source's maxLength 200"),
        ({"page": {"enum": [-1]}}, "is not valid for the source"),
        ({"limit": {"minimum": 9, "maximum": 3}}, "minimum 9 is above maximum 3"),
        ({"account": {"hidden": True}}, "the source requires it"),
        ({"account": {"hidden": True, "value": 7}}, "7 is not valid"),
        ({"limit": {"default": 0}}, "default: 0 is not valid"),
        ({"limit": {"maximum": 10, "default": 20}}, "default: 20 is not valid"),
        ({"nope": {"maximum": 1}}, "the source has no argument 'nope'"),
        ({"limit": {"value": 3}}, "a fixed value is for a hidden argument"),
        ({"limit": {"hidden": True, "maximum": 3}}, "a hidden argument takes only a fixed"),
        ({"limit": {"max": 3}}, "unknown keys ['max']"),
        ({"query": {"pattern": "("}}, "pattern: a regular expression"),
        ([1], "arguments: a JSON object"),
    ],
)
def test_widening_and_bad_rules_are_refused_with_the_place(crm, rules, message) -> None:
    with pytest.raises(ValidationError) as caught:
        tool_curate(tool=crm, fields={"arguments": rules})
    assert message in " ".join(caught.value.message_dict["arguments"])
    assert not ToolCuration.objects.filter(tool=crm).exists()


def test_name_must_be_valid_and_free_in_the_catalog(acme, globex, crm, make_tool) -> None:
    make_tool("taken", tenant=None)
    with pytest.raises(ValidationError) as caught:
        tool_curate(tool=crm, fields={"name": "taken"})
    assert "already exists in the platform catalog" in caught.value.message_dict["name"][0]
    with pytest.raises(ValidationError) as caught:
        tool_curate(tool=crm, fields={"name": "no spaces"})
    assert "name" in caught.value.message_dict
    # A name another tool publishes through its curation is taken too, also for new tools.
    tool_curate(tool=crm, fields={"name": "find"})
    with pytest.raises(ValidationError) as caught:
        catalog_entry_create(
            model=Tool,
            tenant=None,
            fields={"name": "find", "description": "x", "backend_config": {"handler": "demo.echo"}},
        )
    assert "already exists" in caught.value.message_dict["name"][0]
    # Another tenant's catalog is another namespace.
    catalog_entry_create(
        model=Tool,
        tenant=globex,
        fields={"name": "find", "description": "x", "backend_config": {"handler": "demo.echo"}},
    )


def test_kept_when_the_source_is_rewritten_and_stale_rules_fail_closed(acme, crm, grant) -> None:
    grant(acme, crm)
    tool_curate(
        tool=crm,
        fields={
            "description": "Curated.",
            "arguments": {"account": {"hidden": True, "value": "acme-42"}, "status": {"enum": ["open", "spam"]}},
        },
    )
    # The source changes under it (what an import or a refresh does): "spam" is gone from the
    # enum, and the account argument is renamed.
    schema = {
        "type": "object",
        "properties": {"account_id": {"type": "string"}, "status": {"type": "string", "enum": ["open", "closed"]}},
    }
    catalog_entry_update(entry=crm, changes={"description": "New upstream text.", "input_schema": schema})
    spec = published(acme, "crm_search")
    assert spec is not None
    assert spec.description == "Curated."
    # The enum narrowing no longer fits: left out (the source's own enum applies).
    assert spec.input_schema["properties"]["status"] == {"type": "string", "enum": ["open", "closed"]}
    # The hidden argument stays hidden; its value is not sent to a source that lacks it.
    assert "account" not in spec.input_schema["properties"]
    assert spec.backend_arguments({"account": "evil", "status": "open"}) == {"status": "open"}
    applied = apply_curation(schema, ToolCuration.objects.get(tool=crm).arguments, strict=False)
    assert len(applied.problems) == 2


def test_curation_changes_move_the_fingerprint_are_audited_and_can_be_removed(acme, crm, grant) -> None:
    grant(acme, crm)
    before = published(acme, "crm_search")
    assert before is not None
    tool_curate(tool=crm, fields={"title": "Find"})
    after = published(acme, "crm_search")
    assert after is not None and after.revision != before.revision
    tool_curate(tool=crm, fields={"title": "Find them"})
    again = published(acme, "crm_search")
    assert again is not None and again.revision != after.revision
    events = AuditEvent.objects.filter(object_type="tools_app.ToolCuration").order_by("pk")
    assert [e.action for e in events] == ["created", "updated"]
    assert events[1].changes["title"] == ["Find", "Find them"]
    assert events[1].tenant_id is None  # a platform tool's curation is a platform change
    tool_curation_delete(tool=crm)
    restored = published(acme, "crm_search")
    assert restored is not None and restored.title == "Search" and restored.curation_version == 0
    # An empty curation is no curation.
    assert tool_curate(tool=crm, fields={"name": "", "arguments": {}}) is None
    assert not ToolCuration.objects.exists()


def test_deny_rules_on_the_source_name_still_apply_after_a_rename(acme, crm, grant) -> None:
    grant(acme, crm)
    grant(acme, "crm_*", effect="deny")
    tool_curate(tool=crm, fields={"name": "find_customers"})
    assert published(acme, "find_customers") is None


def test_a_private_tools_curation_is_audited_under_its_tenant(acme, make_tool) -> None:
    tool = make_tool("mine", tenant=acme)
    tool_curate(tool=tool, fields={"description": "Mine, for models."})
    event = AuditEvent.objects.get(object_type="tools_app.ToolCuration")
    assert event.tenant_id == acme.pk


def test_a_test_call_runs_the_published_tool_and_the_backend_gets_the_source_shape(acme, crm) -> None:
    """Through the real call path (tools_app.runs.trial_calls: validation, execute, the python backend)."""
    tool_curate(
        tool=crm,
        fields={
            "name": "find",
            "arguments": {"account": {"hidden": True, "value": "acme-42"}, "limit": {"default": 7}},
        },
    )
    outcome = tool_test_call(tool=crm, arguments={"query": "abc", "account": "evil"})
    assert outcome.is_error is False
    assert json.loads(outcome.result["content"][0]["text"]) == {
        "received": {"query": "abc", "limit": 7, "account": "acme-42"},
        "tool_name": "find",
    }
    refused = tool_test_call(tool=crm, arguments={"query": "abc", "limit": 0})
    assert refused.is_error is True and "'limit'" in refused.result["content"][0]["text"]


def _openapi(tmp_path, summary: str, states: list[str]) -> str:
    document = {
        "openapi": "3.0.3",
        "info": {"title": "Items", "version": "1"},
        "servers": [{"url": "https://api.example.com/v1"}],
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": summary,
                    "parameters": [
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 100}},
                        {"name": "account", "in": "query", "required": True, "schema": {"type": "string"}},
                        {"name": "state", "in": "query", "schema": {"type": "string", "enum": states}},
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    path = tmp_path / f"items-{len(states)}.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_kept_across_a_reimport_of_the_openapi_document(tmp_path, acme, grant) -> None:
    call_command("import_openapi", _openapi(tmp_path, "List items", ["a", "b", "c"]), "--tenant", "acme", "--grant",
                 stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip
    tool = Tool.objects.get(tenant=acme, name="listItems")
    tool_curate(
        tool=tool,
        fields={
            "name": "items",
            "description": "Lists the items of this account.",
            "arguments": {"account": {"hidden": True, "value": "acme-42"}, "state": {"enum": ["a", "b"]}},
        },
    )
    out = io.StringIO()
    call_command("import_openapi", _openapi(tmp_path, "List all items", ["a", "b", "c", "d"]), "--tenant", "acme",
                 "--approve", stdout=out, stderr=io.StringIO())  # fmt: skip
    assert out.getvalue().startswith("updated listItems")
    tool.refresh_from_db()
    assert tool.title == "List all items" and tool.input_schema["properties"]["state"]["enum"] == ["a", "b", "c", "d"]
    spec = published(acme, "items")
    assert spec is not None and spec.id == tool.pk
    assert (spec.title, spec.description) == ("List all items", "Lists the items of this account.")
    assert set(spec.input_schema["properties"]) == {"limit", "state"} and "required" not in spec.input_schema
    assert spec.input_schema["properties"]["state"]["enum"] == ["a", "b"]
    assert spec.backend_arguments({"state": "a"}) == {"state": "a", "account": "acme-42"}
    # The hidden argument cannot be sent: the imported schema admits no other properties.
    assert argument_problem(spec, {"account": "evil"}) is not None


def test_loading_a_catalog_costs_no_query_per_curation(acme, make_tool, grant) -> None:
    """Curations ride along in the snapshot's tool query (the hot path then runs without one)."""
    make_tool("plain")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            catalog_snapshot(acme.pk)
        return len(captured)

    baseline = queries()
    for number in range(5):
        tool = make_tool(f"curated_{number}")
        tool_curate(tool=tool, fields={"description": f"Curated {number}.", "arguments": {"text": {"maxLength": 9}}})
    assert queries() == baseline
