"""The admin screens of tools and access rules: JSON editing, errors where they belong, the
MCP preview, and tenant scoping (acme's admin never sees globex's tools or rules)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from tools_app.backends.python.registry import handler_names
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.spec import ToolSpec


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:tools_app_{name}", args=args)


def listed(response: Any) -> set[Any]:
    assert response.status_code == 200
    return set(response.context["cl"].result_list)


def form_errors(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 200, "expected the form again, with errors"
    return dict(response.context["adminform"].form.errors)


def stored(tool: Tool) -> Tool:
    """The tool as the database gives it back (PostgreSQL's jsonb does not keep key order)."""
    return Tool.objects.get(pk=tool.pk)


def tool_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "tenant": "",
        "name": "lookup",
        "title": "Lookup",
        "description": "Looks things up.",
        "enabled": "on",
        "input_schema": json.dumps({"type": "object", "properties": {"q": {"type": "string"}}}),
        "output_schema": "",
        "read_only_hint": "true",
        "destructive_hint": "unknown",
        "idempotent_hint": "unknown",
        "open_world_hint": "unknown",
        "icons": "",
        "tags": '["search"]',
        "backend_kind": "python",
        "handler": "demo.echo",
        "backend_config": "",
        "execution_mode": "inline",
        "task_support": "forbidden",
        "timeout_seconds": "30",
        "confirmation": "destructive",
    }
    data.update(overrides)
    return data


def rule_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "effect": "allow", "tool": "", "tool_pattern": "", "tenant": "", "owner": "", "scopes": "", "enabled": "on",
        "note": "",
    }  # fmt: skip
    data.update(overrides)
    return data


@pytest.fixture
def tools(acme, globex, make_tool) -> dict[str, Tool]:
    return {
        "platform": make_tool("platform-tool"),
        "acme": make_tool("acme-tool", tenant=acme),
        "globex": make_tool("globex-tool", tenant=globex),
    }


@pytest.fixture
def rules(acme, globex, tools, grant) -> dict[str, AccessRule]:
    return {
        "platform": grant(None, "*"),
        "platform-for-acme": grant(acme, tools["platform"]),
        "acme": grant(acme, tools["acme"], owner=acme),
        "globex": grant(globex, tools["globex"], owner=globex),
    }


# --- scoping ------------------------------------------------------------------------


def test_superuser_sees_every_tool_and_rule(admin_client: Client, tools, rules) -> None:
    assert listed(admin_client.get(url("tool_changelist"))) == set(tools.values())
    assert listed(admin_client.get(url("accessrule_changelist"))) == set(rules.values())
    assert admin_client.get(url("tool_change", tools["globex"].pk)).status_code == 200
    assert admin_client.get(url("accessrule_change", rules["globex"].pk)).status_code == 200


def test_tenant_admin_sees_only_their_private_tools_and_owned_rules(acme_admin_client: Client, tools, rules) -> None:
    assert listed(acme_admin_client.get(url("tool_changelist"))) == {tools["acme"]}
    assert listed(acme_admin_client.get(url("accessrule_changelist"))) == {rules["acme"]}
    content = acme_admin_client.get(url("tool_changelist"), {"q": "tool"}).content
    assert b"globex-tool" not in content and b"platform-tool" not in content


@pytest.mark.parametrize("view", ["change", "delete", "history"])
def test_tenant_admin_gets_404_outside_their_tenant(acme_admin_client: Client, tools, rules, view: str) -> None:
    # Platform tools and platform rules are hidden from tenant admins, like other tenants' objects.
    for model, pk in (
        ("tool", tools["globex"].pk),
        ("tool", tools["platform"].pk),
        ("accessrule", rules["globex"].pk),
        ("accessrule", rules["platform"].pk),
        ("accessrule", rules["platform-for-acme"].pk),
    ):
        response = acme_admin_client.get(url(f"{model}_{view}", pk))
        assert response.status_code == 404, (model, pk, view)


def test_tenant_admin_cannot_change_another_tenants_tool_by_post(acme_admin_client: Client, tools) -> None:
    response = acme_admin_client.post(url("tool_change", tools["globex"].pk), tool_data(name="globex-tool"))
    assert response.status_code == 404
    assert Tool.objects.get(pk=tools["globex"].pk).version == 1


def test_tenant_admin_can_open_their_own_objects(acme_admin_client: Client, tools, rules) -> None:
    assert acme_admin_client.get(url("tool_change", tools["acme"].pk)).status_code == 200
    assert acme_admin_client.get(url("accessrule_change", rules["acme"].pk)).status_code == 200


def test_tenant_admins_tool_choices_are_limited(acme_admin_client: Client, acme, tools) -> None:
    form = acme_admin_client.get(url("accessrule_add")).context["adminform"].form
    assert list(form.fields["tool"].queryset) == [tools["acme"]]
    assert list(form.fields["tenant"].queryset) == [acme]
    assert "owner" not in form.fields
    autocomplete = acme_admin_client.get(
        reverse("admin:autocomplete"),
        {"app_label": "tools_app", "model_name": "accessrule", "field_name": "tool", "term": "tool"},
    )
    assert [r["id"] for r in autocomplete.json()["results"]] == [str(tools["acme"].pk)]


def test_tenant_admins_new_tool_is_private_to_their_tenant(acme_admin_client: Client, acme) -> None:
    response = acme_admin_client.post(url("tool_add"), tool_data(tenant=""))
    assert form_errors(response)["tenant"] == ["This field is required."]
    assert not Tool.objects.filter(name="lookup").exists()

    response = acme_admin_client.post(url("tool_add"), tool_data(tenant=acme.pk))
    assert response.status_code == 302
    assert Tool.objects.get(name="lookup").tenant == acme


def test_tenant_admin_cannot_create_a_tool_for_another_tenant(acme_admin_client: Client, globex) -> None:
    response = acme_admin_client.post(url("tool_add"), tool_data(tenant=globex.pk))
    assert "tenant" in form_errors(response)
    assert not Tool.objects.filter(name="lookup").exists()


def test_tenant_admins_rules_are_owned_by_their_tenant(acme_admin_client: Client, acme, tools) -> None:
    response = acme_admin_client.post(url("accessrule_add"), rule_data(tool=tools["acme"].pk, tenant=acme.pk))
    assert response.status_code == 302
    rule = AccessRule.objects.get(tool=tools["acme"])
    assert (rule.tenant, rule.owner, rule.created_by.username) == (acme, acme, "acme-admin")


def test_tenant_admin_cannot_make_platform_wide_rules(acme_admin_client: Client, acme) -> None:
    before = AccessRule.objects.count()
    response = acme_admin_client.post(url("accessrule_add"), rule_data(tool_pattern="*", tenant="", owner=""))
    assert form_errors(response)["tenant"] == ["This field is required."]
    assert AccessRule.objects.count() == before


def test_tenant_admin_cannot_grant_platform_or_foreign_tools(acme_admin_client: Client, acme, tools) -> None:
    for tool in (tools["platform"], tools["globex"]):
        response = acme_admin_client.post(url("accessrule_add"), rule_data(tool=tool.pk, tenant=acme.pk))
        assert "tool" in form_errors(response)
    assert not AccessRule.objects.filter(owner=acme).exists()


def test_tenant_admin_denies_a_platform_tool_by_name(acme_admin_client: Client, acme, tools) -> None:
    response = acme_admin_client.post(
        url("accessrule_add"), rule_data(effect="deny", tool_pattern="platform-tool", tenant=acme.pk)
    )
    assert response.status_code == 302
    assert AccessRule.objects.get(tool_pattern="platform-tool").owner == acme


def test_rule_keys_must_belong_to_the_rules_tenant(admin_client: Client, acme, globex, make_key) -> None:
    globex_key, _ = make_key(globex, "gk")
    response = admin_client.post(
        url("accessrule_add"), rule_data(tool_pattern="*", tenant=acme.pk, api_keys=[globex_key.pk])
    )
    assert "belong to another tenant: gk" in form_errors(response)["api_keys"][0]


def test_tenant_admins_key_choices_are_limited(acme_admin_client: Client, acme, globex, make_key) -> None:
    acme_key, _ = make_key(acme, "ak")
    globex_key, _ = make_key(globex, "gk")
    form = acme_admin_client.get(url("accessrule_add")).context["adminform"].form
    assert list(form.fields["api_keys"].queryset) == [acme_key]
    response = acme_admin_client.post(
        url("accessrule_add"), rule_data(tool_pattern="*", tenant=acme.pk, api_keys=[globex_key.pk])
    )
    assert "api_keys" in form_errors(response)


def test_superuser_makes_platform_and_tenant_owned_rules(admin_client: Client, acme, globex, tools) -> None:
    assert admin_client.post(url("accessrule_add"), rule_data(tool_pattern="demo.*")).status_code == 302
    assert AccessRule.objects.get(tool_pattern="demo.*").owner is None
    response = admin_client.post(url("accessrule_add"), rule_data(tool_pattern="x", tenant=acme.pk, owner=globex.pk))
    assert "tenant" in form_errors(response)
    response = admin_client.post(
        url("accessrule_add"), rule_data(tool=tools["platform"].pk, tenant=acme.pk, owner=acme.pk)
    )
    assert "only the tenant's private tools" in form_errors(response)["tool"][0]
    response = admin_client.post(url("accessrule_add"), rule_data(tool=tools["platform"].pk, tool_pattern="*"))
    assert "exactly one target" in form_errors(response)["__all__"][0]


# --- the tool form ------------------------------------------------------------------


def test_json_fields_are_pretty_printed(admin_client: Client, make_tool) -> None:
    tool = stored(make_tool("echo", tags=["a"], icons=[{"src": "https://example.com/i.png"}]))
    form = admin_client.get(url("tool_change", tool.pk)).context["adminform"].form
    rendered = str(form["input_schema"])
    assert escape(json.dumps(tool.input_schema, indent=2)) in rendered
    assert "monospace" in rendered
    assert escape(json.dumps(["a"], indent=2)) in str(form["tags"])
    assert form["handler"].value() == "demo.echo"
    assert form["backend_config"].value() == "{}"  # the handler lives in the select


def test_handler_select_offers_registered_handlers_only(admin_client: Client) -> None:
    form = admin_client.get(url("tool_add")).context["adminform"].form
    assert [value for value, _ in form.fields["handler"].choices] == ["", *handler_names()]


def test_new_tool_from_the_admin(admin_client: Client) -> None:
    response = admin_client.post(url("tool_add"), tool_data(handler="demo.add", backend_config='{"extra": 1}'))
    assert response.status_code == 302
    tool = Tool.objects.get(name="lookup")
    assert tool.tenant is None
    assert tool.backend_config == {"extra": 1, "handler": "demo.add"}
    assert (tool.tags, tool.icons, tool.output_schema, tool.read_only_hint) == (["search"], [], None, True)


def test_unregistered_handler_is_refused(admin_client: Client) -> None:
    errors = form_errors(admin_client.post(url("tool_add"), tool_data(handler="os.system")))
    assert list(errors) == ["handler"]
    errors = form_errors(admin_client.post(url("tool_add"), tool_data(handler="")))
    assert errors == {"handler": ["Choose the handler that runs this tool."]}


def test_tool_whose_handler_is_gone_keeps_showing_it(admin_client: Client, make_tool) -> None:
    tool = make_tool("echo")
    Tool.objects.filter(pk=tool.pk).update(backend_config={"handler": "retired.handler"})
    form = admin_client.get(url("tool_change", tool.pk)).context["adminform"].form
    assert ("retired.handler", "retired.handler (not registered)") in form.fields["handler"].choices
    assert form["handler"].value() == "retired.handler"
    response = admin_client.post(url("tool_change", tool.pk), tool_data(name="echo", handler="retired.handler"))
    errors = form_errors(response)
    assert "'retired.handler' is not registered" in errors["handler"][0]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_schema", '{"type": "object", "properties": {"a": {"type": "strin"}}}', "/properties/a/type"),
        ("input_schema", '{"type": "array"}', 'the root must declare "type": "object"'),
        (
            "input_schema",
            '{"type": "object", "properties": {"p": {"$ref": "https://x.test/s.json"}}}',
            "points outside the schema",
        ),
        ("input_schema", '{"$schema": "https://example.com/nope", "type": "object"}', "unsupported dialect"),
        ("input_schema", "", "This field is required."),
        (
            "input_schema",
            '{"type": "object",}',
            "This is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 19.",
        ),
        ("output_schema", '{"type": "string"}', "outputSchema"),
        ("output_schema", "{oops", "This is not valid JSON"),
        ("icons", '[{"src": "http://insecure.test/i.png"}]', "https: or data: URI"),
        ("tags", '"demo"', "Tags must be a JSON list"),
        ("backend_config", "[]", "must be a JSON object"),
        ("description", "", "This field is required."),
        ("name", "bad name", "Tool names are 1-128 characters"),
    ],
)
def test_bad_input_shows_the_error_under_its_field(admin_client: Client, field: str, value: str, message: str) -> None:
    errors = form_errors(admin_client.post(url("tool_add"), tool_data(**{field: value})))
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert not Tool.objects.filter(name__in=["lookup", "bad name"]).exists()


def test_error_page_shows_the_message_and_keeps_the_typed_text(admin_client: Client) -> None:
    typed = '{"type": "object", "properties": {"a": {"type": "strin"}}}'
    response = admin_client.post(url("tool_add"), tool_data(input_schema=typed))
    content = response.content.decode()
    [message] = form_errors(response)["input_schema"]
    assert message.startswith("inputSchema: at /properties/a/type the keyword ")
    # Rendered in the field's own error list, right above its textarea.
    assert escape(message) in content.split('name="input_schema"')[0].rsplit('class="errorlist', 1)[1]
    assert escape(json.dumps(json.loads(typed), indent=2)) in content

    response = admin_client.post(url("tool_add"), tool_data(input_schema='{"broken": '))
    assert escape('{"broken": ') in response.content.decode()


def test_duplicate_names_are_refused_per_catalog(admin_client: Client, acme, make_tool) -> None:
    make_tool("lookup")
    errors = form_errors(admin_client.post(url("tool_add"), tool_data()))
    assert errors == {"name": ["A platform tool named 'lookup' already exists."]}
    # A private tool may share a platform tool's name (and shadows it for its tenant).
    assert admin_client.post(url("tool_add"), tool_data(tenant=acme.pk)).status_code == 302
    errors = form_errors(admin_client.post(url("tool_add"), tool_data(tenant=acme.pk)))
    assert errors == {"name": ["acme already has a private tool named 'lookup'."]}
    # Saving a tool under its own name is not a clash.
    tool = Tool.objects.get(name="lookup", tenant=acme)
    assert admin_client.post(url("tool_change", tool.pk), tool_data(tenant=acme.pk)).status_code == 302


def test_saving_in_the_admin_bumps_the_version(admin_client: Client, make_tool) -> None:
    tool = make_tool("lookup")
    response = admin_client.post(url("tool_change", tool.pk), tool_data(description="Better words."))
    assert response.status_code == 302
    tool.refresh_from_db()
    assert (tool.version, tool.description) == (2, "Better words.")


# --- MCP preview --------------------------------------------------------------------


def test_mcp_preview_shows_the_tools_list_entry(admin_client: Client, make_tool) -> None:
    tool = make_tool(
        "lookup", title="Lookup", output_schema={"type": "object"}, read_only_hint=True, task_support="optional"
    )
    response = admin_client.get(url("tool_change", tool.pk))
    wire = ToolSpec.from_model(stored(tool)).wire
    assert wire["annotations"] == {"readOnlyHint": True} and wire["execution"] == {"taskSupport": "optional"}
    assert escape(json.dumps(wire, indent=2)) in response.content.decode()
    assert b"mcp-preview" in response.content


def test_mcp_preview_shows_the_saved_tool_not_rejected_edits(admin_client: Client, make_tool) -> None:
    tool = make_tool("lookup", title="Saved title")
    response = admin_client.post(url("tool_change", tool.pk), tool_data(title="Unsaved title", input_schema="[]"))
    assert response.status_code == 200
    preview = response.content.decode().split("mcp-preview", 1)[1].split("</pre>", 1)[0]
    assert "Saved title" in preview and "Unsaved title" not in preview


def test_add_page_has_no_preview(admin_client: Client) -> None:
    assert b"mcp-preview" not in admin_client.get(url("tool_add")).content


def test_tenant_admin_sees_the_preview_of_their_tool(acme_admin_client: Client, tools) -> None:
    response = acme_admin_client.get(url("tool_change", tools["acme"].pk))
    assert escape(json.dumps(ToolSpec.from_model(stored(tools["acme"])).wire, indent=2)) in response.content.decode()


@pytest.mark.parametrize(
    ("field", "value"),
    [("input_schema", {"type": "object", "title": "a\u0000b"}), ("backend_config", {"handler": "x", "k\u0000": 1})],
)
def test_json_the_database_cannot_store_is_a_form_error(admin_client: Client, field: str, value: Any) -> None:
    """NUL (and unpaired surrogates) in configuration: refused naming the field, not a 500."""
    response = admin_client.post("/admin/tools_app/tool/add/", tool_data(**{field: json.dumps(value)}))
    assert response.status_code == 200
    assert "may not contain NUL" in response.content.decode()
    assert not Tool.objects.filter(name="lookup").exists()
