"""Admin: the test call on any tool, upstream servers (refresh, publish), tenant scoping."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.backends.upstream_server import SdkUpstream
from tests.tools_app.admin_forms import tool_data
from tools_app.backends.upstream.federation import published_tools
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import secret_set
from tools_app.catalog.models import Tool

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

TOKEN = "admin-upstream-token-42"


@pytest.fixture
def root(db) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    return client


def _outcome(page: str) -> dict:
    match = re.search(r'<pre class="test-call-result"[^>]*>(.*?)</pre>', page, re.S)
    assert match, page
    return json.loads(match.group(1).replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&"))


def test_test_call_runs_a_python_tool_through_the_real_path(root, make_tool):
    tool = make_tool("echo_it", handler="demo.echo")
    page = root.get(f"/admin/tools_app/tool/{tool.pk}/change/").content.decode()
    assert f"/admin/tools_app/tool/{tool.pk}/test-call/" in page

    form = root.get(f"/admin/tools_app/tool/{tool.pk}/test-call/").content.decode()
    assert "&quot;text&quot;: &quot;&quot;" in form  # the required argument, as a starting point

    ran = root.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": '{"text": "hello"}'})
    assert ran.status_code == 200
    assert _outcome(ran.content.decode()) == {"content": [{"type": "text", "text": "hello"}]}

    invalid = root.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": '{"text": 5}'})
    result = _outcome(invalid.content.decode())
    assert result["isError"] is True and "'text' failed rule 'type'" in result["content"][0]["text"]

    broken_json = root.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": '{"text": '})
    assert "This is not valid JSON" in broken_json.content.decode()
    not_object = root.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": "[1]"})
    assert "The arguments must be a JSON object." in not_object.content.decode()


def test_test_call_of_an_http_tool_checks_the_output_schema(root, api, allow):
    allow(api.host_port)
    tool = Tool(
        name="typed",
        description="d",
        backend_kind="http",
        backend_config={"url": f"{api.origin}/json?value=" + '{"n": "x"}'},
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    tool.full_clean()
    tool.save()
    ran = root.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": "{}"})
    result = _outcome(ran.content.decode())
    assert result["isError"] is True
    assert "does not match its outputSchema" in result["content"][0]["text"]


def test_test_call_is_scoped_to_the_tenant_admins_tools(acme, globex, make_tool, acme_admin_client):
    own = make_tool("acme_echo", tenant=acme)
    foreign = make_tool("globex_echo", tenant=globex)
    platform = make_tool("platform_echo")
    assert acme_admin_client.get(f"/admin/tools_app/tool/{own.pk}/test-call/").status_code == 200
    for tool in (foreign, platform):
        assert acme_admin_client.get(f"/admin/tools_app/tool/{tool.pk}/test-call/").status_code == 404
        response = acme_admin_client.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": '{"text": "x"}'})
        assert response.status_code == 404


@pytest.fixture
def upstream() -> Iterator[SdkUpstream]:
    server = SdkUpstream(TOKEN).start()
    yield server
    server.stop()


def test_register_refresh_and_publish_an_upstream_in_the_admin(root, upstream, allow):
    allow(upstream.host_port)
    secret = secret_set(tenant=None, name="up-token", value=TOKEN)
    added = root.post(
        "/admin/tools_app/upstreamserver/add/",
        {
            "name": "sdk",
            "url": upstream.url,
            "enabled": "on",
            "auth": "bearer",
            "auth_header": "",
            "secret": secret.pk,
            "tool_prefix": "sdk.",
            "tags": '["sdk"]',
            "timeout_seconds": "20",
            "tenant": "",
        },
    )
    assert added.status_code == 302, added.content.decode()
    server = UpstreamServer.objects.get(name="sdk")

    refreshed = root.post(f"/admin/tools_app/upstreamserver/{server.pk}/refresh/", follow=True)
    page = refreshed.content.decode()
    assert "Sdk refreshed: not published count, add" in page
    assert "<code>count</code>" in page and "not published" in page

    publish_page = root.get(f"/admin/tools_app/upstreamserver/{server.pk}/publish/").content.decode()
    offered = re.findall(r"<code>([^<]+)</code></label>", publish_page)
    assert "add" in offered and "count" in offered
    form = {}
    for index, name in enumerate(offered):
        if name in ("add", "count"):
            form[f"publish-{index}"] = "on"
        form[f"name-{index}"] = "sdk.sum" if name == "add" else f"sdk.{name}"
    saved = root.post(f"/admin/tools_app/upstreamserver/{server.pk}/publish/", form, follow=True)
    assert "Sdk: added sdk.count, sdk.sum." in saved.content.decode()
    tools = {tool.name: tool for tool in published_tools(server)}
    assert set(tools) == {"sdk.sum", "sdk.count"}
    assert tools["sdk.sum"].tags == ["sdk"] and tools["sdk.sum"].timeout_seconds == 20

    ran = root.post(f"/admin/tools_app/tool/{tools['sdk.sum'].pk}/test-call/", {"arguments": '{"a": 1, "b": 2}'})
    assert _outcome(ran.content.decode())["structuredContent"] == {"result": 3}

    clash = dict(form)
    clash[f"name-{offered.index('count')}"] = "sdk.sum"
    refused = root.post(f"/admin/tools_app/upstreamserver/{server.pk}/publish/", clash)
    assert "a tool named &#x27;sdk.sum&#x27; already exists" in refused.content.decode()


def test_the_refresh_action_reports_failures(root, upstream, allow):
    allow()  # the upstream's loopback port stays closed
    secret = secret_set(tenant=None, name="up-token", value=TOKEN)
    server = UpstreamServer.objects.create(name="closed", url=upstream.url, auth="bearer", secret=secret)
    response = root.post(
        "/admin/tools_app/upstreamserver/",
        {"action": "refresh_selected", "_selected_action": [server.pk]},
        follow=True,
    )
    assert "destination 127.0.0.1 is a loopback address" in response.content.decode()
    server.refresh_from_db()
    assert "loopback" in server.last_error


def test_upstream_admin_is_scoped_per_tenant(acme, globex, acme_admin_client):
    foreign_secret = secret_set(tenant=globex, name="globex-token", value="globex-value-99")
    own_secret = secret_set(tenant=acme, name="acme-token", value="acme-value-99")
    foreign = UpstreamServer.objects.create(tenant=globex, name="g", url="https://g.example/mcp")
    assert acme_admin_client.get(f"/admin/tools_app/upstreamserver/{foreign.pk}/change/").status_code == 404
    assert acme_admin_client.post(f"/admin/tools_app/upstreamserver/{foreign.pk}/refresh/").status_code == 404
    assert acme_admin_client.get(f"/admin/tools_app/upstreamserver/{foreign.pk}/publish/").status_code == 404

    add_page = acme_admin_client.get("/admin/tools_app/upstreamserver/add/").content.decode()
    assert "acme-token" in add_page and "globex-token" not in add_page
    refused = acme_admin_client.post(
        "/admin/tools_app/upstreamserver/add/",
        {
            "tenant": acme.pk,
            "name": "sneaky",
            "url": "https://x.example/mcp",
            "enabled": "on",
            "auth": "bearer",
            "secret": foreign_secret.pk,
            "tags": "[]",
            "timeout_seconds": "30",
        },
    )
    assert refused.status_code == 200
    assert not UpstreamServer.objects.filter(name="sneaky").exists()
    assert own_secret.pk  # (offered above)


def test_an_http_tool_is_made_in_the_admin_and_its_errors_name_the_problem(root, acme):
    secret_set(tenant=None, name="api-token", value="admin-made-value-1")
    config = {"url": "https://api.example.com/items/{id}", "auth": {"type": "bearer", "secret": "api-token"}}
    data = tool_data(name="item", backend_kind="http", handler="", backend_config=json.dumps(config))
    assert root.post("/admin/tools_app/tool/add/", data).status_code == 302
    tool = Tool.objects.get(name="item")
    assert tool.backend_kind == "http" and tool.backend_config == config

    # The same tool for acme cannot use the platform's secret.
    refused = root.post("/admin/tools_app/tool/add/", {**data, "name": "acme_item", "tenant": acme.pk})
    assert refused.status_code == 200
    assert "there is no secret named &#x27;api-token&#x27; among this tenant&#x27;s secrets" in refused.content.decode()
    bad_host = root.post(
        "/admin/tools_app/tool/add/",
        {**data, "name": "bad", "backend_config": json.dumps({"url": "https://{host}/x"})},
    )
    assert "never the host or port" in bad_host.content.decode()
