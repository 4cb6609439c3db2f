"""The curation on a tool's admin page: source and curated definitions side by side, edited
inline, refused when it would widen the source, and only by who may change the tool."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from audit.models import AuditEvent
from tests.tools_app.admin_forms import curation_data, tool_data
from tools_app.catalog.models import Tool, ToolCuration
from tools_app.catalog.services import tool_curate

SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "maximum": 100}},
    "required": ["q"],
}


@pytest.fixture
def lookup(acme, make_tool) -> Tool:
    return make_tool("lookup", tenant=acme, title="Lookup", description="Looks things up.", input_schema=SCHEMA)


def change_url(tool: Tool) -> str:
    return f"/admin/tools_app/tool/{tool.pk}/change/"


def form_of(tool: Tool, **overrides) -> dict[str, str]:
    fields = {
        "tenant": str(tool.tenant_id), "name": tool.name, "title": tool.title, "description": tool.description,
        "input_schema": json.dumps(tool.input_schema), "tags": "[]", "read_only_hint": "unknown",
        "confirmation": "none",
    }  # fmt: skip
    return tool_data(**{**fields, **overrides})


def columns(html: str) -> tuple[str, str]:
    source = re.search(r'<pre class="curation-source"[^>]*>(.*?)</pre>', html, re.S)
    published = re.search(r'<pre class="curation-published"[^>]*>(.*?)</pre>', html, re.S)
    assert source is not None and published is not None
    return source.group(1), published.group(1)


def test_edit_inline_and_see_both_definitions(acme_admin_client: Client, lookup: Tool) -> None:
    rules = {"limit": {"hidden": True, "value": 10}}
    data = {**form_of(lookup), **curation_data(name="search", description="Searches.", arguments=json.dumps(rules))}
    response = acme_admin_client.post(change_url(lookup), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    curation = ToolCuration.objects.get(tool=lookup)
    assert (curation.name, curation.arguments) == ("search", rules)
    assert AuditEvent.objects.filter(object_type="tools_app.ToolCuration", action="created").exists()

    page = acme_admin_client.get(change_url(lookup)).content.decode()
    source, published = columns(page)
    assert "&quot;name&quot;: &quot;lookup&quot;" in source and "&quot;limit&quot;" in source
    assert "&quot;name&quot;: &quot;search&quot;" in published and "&quot;limit&quot;" not in published
    assert "Searches." in published and "Looks things up." in source


def test_widening_is_refused_on_the_form(acme_admin_client: Client, lookup: Tool) -> None:
    data = {**form_of(lookup), **curation_data(arguments=json.dumps({"limit": {"maximum": 500}}))}
    response = acme_admin_client.post(change_url(lookup), data)
    assert response.status_code == 200
    assert "would widen the source&#x27;s upper bound 100" in response.content.decode()
    assert not ToolCuration.objects.exists()


def test_the_curation_is_checked_against_the_tool_as_submitted(acme_admin_client: Client, lookup: Tool) -> None:
    """Changing the source's schema and curating its new argument in one submission."""
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "lang": {"type": "string", "enum": ["en", "de"]}}}
    data = {
        **form_of(lookup, input_schema=json.dumps(schema)),
        **curation_data(arguments=json.dumps({"lang": {"enum": ["de"]}})),
    }
    assert acme_admin_client.post(change_url(lookup), data).status_code == 302
    assert ToolCuration.objects.get(tool=lookup).arguments == {"lang": {"enum": ["de"]}}


def test_clearing_or_deleting_removes_it_and_a_post_without_it_keeps_it(
    acme_admin_client: Client, lookup: Tool
) -> None:
    curation = tool_curate(tool=lookup, fields={"title": "Find"})
    assert curation is not None
    # A script posting only the tool's fields leaves the curation alone.
    assert acme_admin_client.post(change_url(lookup), form_of(lookup, description="Better.")).status_code == 302
    assert ToolCuration.objects.filter(tool=lookup).exists()
    data = {**form_of(lookup), **curation_data(initial=1, id=str(curation.pk), tool=str(lookup.pk), DELETE="on")}
    data["curation-0-title"] = "Find"
    assert acme_admin_client.post(change_url(lookup), data).status_code == 302
    assert not ToolCuration.objects.exists()


def test_another_tenants_tool_cannot_be_curated(acme_admin_client: Client, globex, make_tool) -> None:
    theirs = make_tool("theirs", tenant=globex, input_schema=SCHEMA)
    data = {**form_of(theirs), **curation_data(name="mine")}
    assert acme_admin_client.post(change_url(theirs), data).status_code == 404
    assert not ToolCuration.objects.exists()


def test_the_test_call_page_starts_from_the_published_schema(acme_admin_client: Client, lookup: Tool) -> None:
    tool_curate(tool=lookup, fields={"arguments": {"q": {"hidden": True, "value": "fixed"}}})
    page = acme_admin_client.get(f"/admin/tools_app/tool/{lookup.pk}/test-call/")
    assert page.status_code == 200
    assert page.context["form"].initial["arguments"] == {}  # q is the admin's now, not the caller's
