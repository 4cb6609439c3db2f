"""Resource templates and prompts served by an HTTP endpoint: the HTTP tools' settings, SSRF
guard and secrets, through the same read and get paths MCP clients use."""

from __future__ import annotations

import base64
import json

import pytest
from asgiref.sync import async_to_sync

from mcp_platform.mcp.host import Requester
from mcp_platform.mcp.jsonrpc import JsonRpcError
from tests.backends.calls import PNG
from tests.credentials import principal_of
from tools_app.backends.vault import secret_set
from tools_app.catalog.cache import catalog_cache
from tools_app.catalog.models import AccessRule, Prompt, ResourceTemplate
from tools_app.runs.host import PlatformToolHost

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(acme):
    AccessRule.objects.create(tenant=acme, kind="any", tool_pattern="*")
    catalog_cache.clear()
    return PlatformToolHost(None, catalog_cache)  # type: ignore[arg-type]


def _template(acme, name: str, uri_template: str, config: dict, **fields) -> ResourceTemplate:
    template = ResourceTemplate(
        tenant=acme, name=name, uri_template=uri_template, backend_kind="http", backend_config=config, **fields
    )
    template.full_clean()
    template.save()
    catalog_cache.clear()
    return template


def _read(host, acme, uri: str):
    return async_to_sync(host.read_resource)(principal_of(acme), uri, Requester())


def test_a_template_reads_text_and_binary_from_its_endpoint(host, acme, api, allow):
    allow(api.host_port)
    _template(acme, "users", "api://users/{user}", {"url": f"{api.origin}/users/{{user}}?page=2"})
    _template(acme, "picture", "api://picture", {"url": f"{api.origin}/image"}, mime_type="image/png")
    text = _read(host, acme, "api://users/a%20b")["contents"][0]
    assert text["uri"] == "api://users/a%20b" and text["mimeType"] == "application/json"
    assert json.loads(text["text"])["path"] == "/users/a%20b?page=2"
    blob = _read(host, acme, "api://picture")["contents"][0]
    assert blob["mimeType"] == "image/png" and blob["blob"] == base64.b64encode(PNG).decode()


def test_the_ssrf_guard_and_secrets_apply(host, acme, api, allow):
    _template(acme, "guarded", "api://guarded", {"url": f"{api.origin}/text"})
    with pytest.raises(JsonRpcError) as refused:
        _read(host, acme, "api://guarded")
    assert refused.value.code == -32603 and "refused" in refused.value.message
    allow(api.host_port)
    secret_set(tenant=acme, name="api-token", value="tok-3f1a")
    _template(
        acme,
        "whoami",
        "api://whoami",
        {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}},
    )
    assert json.loads(_read(host, acme, "api://whoami")["contents"][0]["text"]) == {"authenticated": True}
    assert api.requests[-1].headers["authorization"] == "Bearer tok-3f1a"
    with pytest.raises(JsonRpcError) as failing:
        _template(acme, "broken", "api://broken", {"url": f"{api.origin}/status/500"})
        _read(host, acme, "api://broken")
    assert "HTTP 500" in failing.value.message


def test_a_prompt_comes_from_its_endpoint(host, acme, api, allow):
    allow(api.host_port)
    prompt = Prompt(
        tenant=acme,
        name="remote",
        description="From an API.",
        arguments=[{"name": "topic", "required": True}],
        backend_kind="http",
        backend_config={"method": "POST", "url": f"{api.origin}/echo"},
    )
    prompt.full_clean()
    prompt.save()
    catalog_cache.clear()
    with pytest.raises(JsonRpcError) as bad_shape:  # /echo answers {"method", "received"}: no messages
        async_to_sync(host.get_prompt)(principal_of(acme), "remote", {"topic": "tides"}, Requester())
    assert "messages" in bad_shape.value.message
    assert api.requests[-1].body == b'{"topic": "tides"}'
