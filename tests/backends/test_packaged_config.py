"""Packaged servers' settings: model validation, the registry's server.json, add_upstream's
errors (no runner needed: each fails before a server would start)."""

from __future__ import annotations

import io
import json

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from mcp_platform.redis_clients import sync_redis
from tenants.services import tenant_create
from tools_app.backends.packaged import locator
from tools_app.backends.packaged.registry_json import RegistryProblem, read_server_json
from tools_app.backends.upstream.federation import endpoint_for_tool
from tools_app.backends.upstream.models import UpstreamServer

pytestmark = pytest.mark.django_db

SERVER_JSON = {
    "name": "io.github.example/weather",
    "description": "Weather forecasts",
    "version": "1.0.2",
    "packages": [
        {"registryType": "oci", "identifier": "example/weather", "version": "1.0.2"},
        {
            "registryType": "npm",
            "identifier": "@example/weather-mcp",
            "version": "1.0.2",
            "transport": {"type": "stdio"},
            "packageArguments": [
                {"type": "positional", "value": "serve"},
                {"type": "named", "name": "--units", "default": "metric"},
            ],
            "environmentVariables": [
                {"name": "WEATHER_API_KEY", "isRequired": True, "isSecret": True},
                {"name": "LOG_LEVEL", "default": "info"},
            ],
        },
    ],
}


def test_server_json_fills_the_packaged_settings():
    entry = read_server_json(SERVER_JSON)
    assert entry.fields == {
        "kind": "npm",
        "package": "@example/weather-mcp",
        "version": "1.0.2",
        "args": ["serve", "--units", "metric"],
        "env": {"LOG_LEVEL": "info"},
    }
    assert entry.secret_variables == ["WEATHER_API_KEY"] and entry.required_variables == ["WEATHER_API_KEY"]


def test_server_json_with_only_a_remote_becomes_an_http_upstream():
    entry = read_server_json({"remotes": [{"type": "streamable-http", "url": "https://mcp.example.com/mcp"}]})
    assert entry.fields == {"kind": "http", "url": "https://mcp.example.com/mcp"}
    with pytest.raises(RegistryProblem, match="no npm or PyPI package"):
        read_server_json({"packages": [{"registryType": "oci", "identifier": "x", "version": "1"}]})


def test_a_packaged_server_needs_an_exact_version_and_clean_settings():
    tenant = tenant_create(slug="cfg-a", name="A")
    server = UpstreamServer(
        tenant=tenant,
        name="bad",
        kind="npm",
        package="@scope/thing",
        version="^1.0",
        args=["ok", 3],
        env={"1BAD": "x"},
        env_secrets={"TOKEN": "missing-secret"},
        allow_hosts=["http://not-a-host/"],
    )
    with pytest.raises(ValidationError) as problem:
        server.full_clean()
    assert set(problem.value.message_dict) == {"version", "args", "env", "env_secrets", "allow_hosts"}
    assert "No secret named missing-secret" in problem.value.message_dict["env_secrets"][0]
    with pytest.raises(ValidationError, match="needs its URL"):
        UpstreamServer(tenant=tenant, name="http-without-url").full_clean()


def test_add_upstream_refuses_bad_input_with_a_clear_error():
    tenant_create(slug="cfg-b", name="B")
    with pytest.raises(CommandError, match="there is no tenant 'nope'"):
        call_command("add_upstream", "x", "--tenant", "nope", "--pypi", "mcp-server-time==1.0")
    with pytest.raises(CommandError, match="pin a PyPI version with =="):
        call_command("add_upstream", "x", "--tenant", "cfg-b", "--pypi", "mcp-server-time>=1.0")
    with pytest.raises(CommandError, match="--env takes NAME=VALUE"):
        call_command("add_upstream", "x", "--tenant", "cfg-b", "--pypi", "a==1", "--env", "NOVALUE")
    with pytest.raises(CommandError, match="version: Pin an exact version"):
        call_command("add_upstream", "x", "--tenant", "cfg-b", "--npm", "left-pad@^1.0", stdout=io.StringIO())
    assert not UpstreamServer.objects.filter(tenant__slug="cfg-b").exists()  # nothing half-made


def _running(scope: str, url: str) -> None:
    status = {"state": "running", "url": url, "token": f"token-{url[-1]}", "runner": "test", "tenant": 0}
    sync_redis().set(locator.status_key(scope), json.dumps(status), ex=30)


def test_each_user_of_a_per_user_server_and_each_tenant_of_a_platform_server_has_its_own_instance():
    locator.clear_cache()
    alpha, beta = tenant_create(slug="cfg-alpha", name="Alpha"), tenant_create(slug="cfg-beta", name="Beta")
    per_user = UpstreamServer.objects.create(
        tenant=alpha, name="mine", kind="npm", package="x", version="1.0.0", per_user=True
    )
    platform = UpstreamServer.objects.create(tenant=None, name="shared", kind="pypi", package="y", version="1.0.0")
    # What a runner publishes for each instance it runs.
    _running(locator.scope_of(per_user.pk, alpha.pk, "key:1"), "http://runner/i/1")
    _running(locator.scope_of(per_user.pk, alpha.pk, "key:2"), "http://runner/i/2")
    _running(locator.scope_of(platform.pk, alpha.pk, None), "http://runner/i/3")
    _running(locator.scope_of(platform.pk, beta.pk, None), "http://runner/i/4")

    def located(upstream: UpstreamServer, tenant_id: int, user: str) -> str:
        endpoint = async_to_sync(endpoint_for_tool)(
            upstream.pk, upstream.tenant_id, caller_tenant_id=tenant_id, user=user
        )
        assert endpoint is not None and endpoint.internal
        return endpoint.url

    assert located(per_user, alpha.pk, "key:1") == "http://runner/i/1"
    assert located(per_user, alpha.pk, "key:2") == "http://runner/i/2"
    # A server not marked per user ignores who calls; the calling tenant decides.
    assert located(platform, alpha.pk, "key:1") == "http://runner/i/3"
    assert located(platform, beta.pk, "key:9") == "http://runner/i/4"


def test_an_install_that_fails_is_recorded_and_shown_in_the_admin(settings, tmp_path, admin_client):
    """A version the registry does not have: npm refuses, add_upstream says why and exits 1, the
    server stays registered with the reason, and its admin page shows it."""
    settings.TOOLBAY_PACKAGE_CACHE = str(tmp_path)
    tenant_create(slug="cfg-install", name="Install")
    missing = "@modelcontextprotocol/server-everything@0.0.0-no-such-version"
    with pytest.raises(CommandError, match="the install failed") as problem:
        call_command("add_upstream", "broken", "--tenant", "cfg-install", "--npm", missing, stderr=io.StringIO())
    assert "0.0.0-no-such-version" in str(problem.value)
    server = UpstreamServer.objects.get(name="broken", tenant__slug="cfg-install")
    assert server.install_state == "failed" and "npm install" in server.install_error
    page = admin_client.get(f"/admin/tools_app/upstreamserver/{server.pk}/change/").content.decode()
    assert "Install failed" in page and "0.0.0-no-such-version" in page
    listing = admin_client.get("/admin/tools_app/upstreamserver/").content.decode()
    assert "(install failed)" in listing
