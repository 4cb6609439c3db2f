"""Resources, resource templates and prompts in the catalog: URI templates, Mustache messages,
access rules by kind, the warm hot path (no query), and the admin screens' scoping."""

from __future__ import annotations

import base64

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from conformance.handlers.fixtures import PNG_1PX
from mcp_platform.mcp.host import Requester
from tests.credentials import principal_of
from tools_app.catalog.cache import catalog_cache, content_cache
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate
from tools_app.catalog.prompt_messages import MessageProblem, check_messages, render_messages
from tools_app.catalog.uri_templates import TemplateProblem, compile_template
from tools_app.runs.host import PlatformToolHost

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("test://template/{id}/data", "test://template/123/data", {"id": "123"}),
        ("test://template/{id}/data", "test://template/1/2/data", None),
        ("file:///logs/{day}.txt", "file:///logs/2026-01-02.txt", {"day": "2026-01-02"}),
        ("file:///{+path}", "file:///a/b/c.txt", {"path": "a/b/c.txt"}),
        ("docs://{name}", "docs://caf%C3%A9", {"name": "café"}),
        ("api://items{?page,size}", "api://items?size=5", {"size": "5"}),
        ("api://items{?page,size}", "api://items?other=1", None),
        ("api://items{/id}", "api://items", {}),
    ],
)
def test_uri_templates_match_what_they_expand_to(template, uri, expected):
    matcher = compile_template(template)
    assert matcher.match(uri) == expected
    if expected:
        assert matcher.match(matcher.expand(expected)) == expected


@pytest.mark.parametrize("bad", ["no-scheme/{x}", "x://{a*}", "x://{a}/{a}", "x://{?q}/more", "x://{unclosed"])
def test_unusable_uri_templates_are_refused(bad):
    with pytest.raises(TemplateProblem):
        compile_template(bad)


def test_prompt_messages_render_arguments_without_code_or_escaping():
    messages = [
        {
            "role": "user",
            "content": {"type": "text", "text": "Hi {{who}}{{#mood}} ({{mood}}){{/mood}}{{^mood}}!{{/mood}}"},
        },
        {
            "role": "user",
            "content": {"type": "resource", "resource": {"uri": "doc://{{who}}", "text": "About {{who}}"}},
        },
        {"role": "assistant", "content": {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}},
    ]
    check_messages(messages, {"who", "mood"})
    rendered = render_messages(messages, {"who": "<b>Ada</b>"})
    assert rendered[0]["content"]["text"] == "Hi <b>Ada</b>!"
    assert rendered[1]["content"]["resource"] == {"uri": "doc://<b>Ada</b>", "text": "About <b>Ada</b>"}
    assert rendered[2] == messages[2]
    # Arguments are data: a value that looks like a tag is not expanded again.
    assert render_messages(messages[:1], {"who": "{{mood}}", "mood": "x"})[0]["content"]["text"] == "Hi {{mood}} (x)"


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([], "non-empty"),
        ([{"role": "system", "content": {"type": "text", "text": "x"}}], "'role'"),
        ([{"role": "user", "content": {"type": "text", "text": "{{> partial}}"}}], "partials"),
        ([{"role": "user", "content": {"type": "text", "text": "{{=<% %>=}}"}}], "delimiter"),
        ([{"role": "user", "content": {"type": "text", "text": "{{#open}}"}}], "Mustache"),
        ([{"role": "user", "content": {"type": "text", "text": "{{stranger}}"}}], "undeclared"),
        ([{"role": "user", "content": {"type": "image", "data": "not base64!", "mimeType": "image/png"}}], "base64"),
        ([{"role": "user", "content": {"type": "resource", "resource": {"uri": "x://y"}}}], "'text' or 'blob'"),
    ],
)
def test_broken_prompt_messages_are_refused(messages, problem):
    with pytest.raises(MessageProblem, match=problem):
        check_messages(messages, {"who"})


def test_model_checks(acme, settings):
    settings.TOOLBAY_RESOURCE_MAX_BYTES = 10
    with pytest.raises(ValidationError) as too_big:
        Resource(uri="x://big", name="big", text="more than ten bytes").full_clean()
    assert "text" in too_big.value.message_dict
    with pytest.raises(ValidationError) as static_settings:
        Resource(uri="x://s", name="s", backend_config={"handler": "x"}).full_clean()
    assert "backend_config" in static_settings.value.message_dict
    with pytest.raises(ValidationError) as no_description:
        Prompt(name="p", messages=[{"role": "user", "content": {"type": "text", "text": "x"}}]).full_clean()
    assert "description" in no_description.value.message_dict
    with pytest.raises(ValidationError) as completions:
        ResourceTemplate(
            name="t",
            uri_template="x://{a}",
            backend_config={"handler": "conformance.template_data"},
            completions={"b": ["1"]},
        ).full_clean()
    assert "completions" in completions.value.message_dict
    with pytest.raises(ValidationError) as tool_rule:
        AccessRule(tool_pattern="", tool=None, kind="prompt").full_clean()
    assert tool_rule.value.messages


@pytest.fixture
def shelf(acme, globex, make_tool):
    """A platform resource and prompt, acme's private resource shadowing the platform URI, a tool."""
    platform_doc = Resource.objects.create(uri="doc://guide", name="guide", text="platform guide", tags=["docs"])
    acme_doc = Resource.objects.create(tenant=acme, uri="doc://guide", name="guide", text="acme's guide", tags=["docs"])
    prompt = Prompt.objects.create(
        name="summarize",
        description="Summarizes.",
        messages=[{"role": "user", "content": {"type": "text", "text": "Go"}}],
        tags=["docs"],
    )
    tool = make_tool("docs_search", tags=["docs"])
    return {"platform_doc": platform_doc, "acme_doc": acme_doc, "prompt": prompt, "tool": tool}


def _visible(principal):
    catalog_cache.clear()
    return async_to_sync(catalog_cache.visible)(principal)


def test_rules_grant_only_their_kind_and_deny_wins(acme, globex, make_key, shelf, grant):
    principal = principal_of(acme)
    grant(acme, "tag:docs")  # kind tool (the default): the tool only
    seen = _visible(principal)
    assert [t.name for t in seen.tools] == ["docs_search"] and not seen.resources and not seen.prompts
    AccessRule.objects.create(tenant=acme, kind="resource", tool_pattern="doc://*")
    seen = _visible(principal)
    assert [(r.uri, r.tenant_id) for r in seen.resources] == [("doc://guide", acme.pk)]  # private shadows platform
    assert not seen.prompts
    AccessRule.objects.create(tenant=acme, kind="any", tool_pattern="summarize")
    assert [p.name for p in _visible(principal).prompts] == ["summarize"]
    key, _ = make_key(acme, "limited")
    deny = AccessRule.objects.create(tenant=acme, kind="any", tool_pattern="tag:docs", effect="deny")
    deny.api_keys.set([key])
    limited = principal_of(acme, key)
    seen = _visible(limited)
    assert not seen.tools and not seen.resources and not seen.prompts
    assert _visible(principal).prompts  # other credentials keep them
    # globex sees the platform resource only once granted, never acme's.
    AccessRule.objects.create(tenant=globex, kind="resource", tool_pattern="tag:docs")
    assert [(r.uri, r.tenant_id) for r in _visible(principal_of(globex)).resources] == [("doc://guide", None)]


def test_tenant_owned_rules_cannot_grant_platform_entries(acme, shelf):
    AccessRule.objects.create(tenant=acme, owner=acme, kind="any", tool_pattern="*")
    seen = _visible(principal_of(acme))
    assert [r.tenant_id for r in seen.resources] == [acme.pk] and not seen.prompts and not seen.tools


def test_a_warm_read_costs_no_query(acme, shelf, django_assert_num_queries):
    AccessRule.objects.create(tenant=acme, kind="any", tool_pattern="*")
    blob = Resource.objects.create(
        tenant=acme, uri="doc://logo", name="logo", mime_type="image/png", blob=base64.b64decode(PNG_1PX)
    )
    host = PlatformToolHost(None, catalog_cache)  # type: ignore[arg-type]
    principal = principal_of(acme)
    catalog_cache.clear()
    content_cache.clear()
    read = async_to_sync(host.read_resource)
    assert read(principal, "doc://guide", Requester())["contents"] == [{"uri": "doc://guide", "text": "acme's guide"}]
    assert read(principal, "doc://logo", Requester())["contents"][0]["blob"] == PNG_1PX
    with django_assert_num_queries(0):
        assert read(principal, "doc://guide", Requester())["contents"][0]["text"] == "acme's guide"
        assert async_to_sync(host.list_prompts)(principal)[0]["name"] == "summarize"
        assert async_to_sync(host.get_prompt)(principal, "summarize", {}, Requester())["messages"]
        assert read(principal, "doc://missing", Requester()) is None
    assert blob.size == len(base64.b64decode(PNG_1PX))


def test_tenant_admins_manage_their_tenants_entries_only(acme, globex, acme_admin_client, shelf):
    foreign = Prompt.objects.create(
        tenant=globex,
        name="secret",
        description="x",
        messages=[{"role": "user", "content": {"type": "text", "text": "x"}}],
    )
    listing = acme_admin_client.get(reverse("admin:tools_app_resource_changelist"))
    assert listing.status_code == 200
    assert "acme&#x27;s guide" not in listing.content.decode()  # the list shows URIs, not content
    assert list(listing.context["cl"].result_list) == [shelf["acme_doc"]]
    assert acme_admin_client.get(reverse("admin:tools_app_prompt_change", args=[foreign.pk])).status_code == 404
    assert acme_admin_client.get(reverse("admin:tools_app_prompt_change", args=[shelf["prompt"].pk])).status_code == 404
    upload = SimpleUploadedFile("logo.png", base64.b64decode(PNG_1PX), content_type="image/png")
    response = acme_admin_client.post(
        reverse("admin:tools_app_resource_add"),
        {
            "tenant": acme.pk, "uri": "doc://logo", "name": "logo", "mime_type": "image/png", "backend_kind": "static",
            "timeout_seconds": "30", "upload": upload, "icons": "[]", "tags": "[]", "audience": '["user"]',
            "backend_config": "{}", "enabled": "on",
        },
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = Resource.objects.get(uri="doc://logo")
    assert bytes(saved.blob) == base64.b64decode(PNG_1PX) and saved.audience == ["user"] and saved.tenant == acme
