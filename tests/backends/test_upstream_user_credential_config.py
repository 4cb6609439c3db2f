"""An upstream server's ``user_credential``: the admin, the model's checks and ``add_upstream``
take the shapes of an HTTP tool's per-user auth, checked by the same code, and name what is
wrong; a provider of another tenant is unknown here. (The calls themselves: tests/connections.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import Client

from oauth.connections.services import provider_save
from tenants.models import Tenant
from tools_app.backends.base import BackendConfigError
from tools_app.backends.http.backend import validate_config as validate_http
from tools_app.backends.upstream.models import UpstreamServer

PROVIDER_FIELDS = {
    "authorization_endpoint": "https://idp.example/authorize",
    "token_endpoint": "https://idp.example/token",
    "client_id": "toolbay",
}


@pytest.fixture
def providers(acme: Tenant, globex: Tenant) -> None:
    provider_save(tenant=acme, name="gh", fields=PROVIDER_FIELDS, client_secret="acme-provider-secret")
    provider_save(tenant=globex, name="theirs", fields=PROVIDER_FIELDS, client_secret="globex-provider-secret")


def _form(acme: Tenant, **fields: Any) -> dict[str, Any]:
    return {
        "tenant": acme.pk,
        "name": "mail",
        "kind": "http",
        "url": "https://mcp.example.com/mcp",
        "enabled": "on",
        "auth": "none",
        "tags": "[]",
        "timeout_seconds": "30",
        **fields,
    }


@pytest.mark.parametrize(
    ("credential", "problem"),
    [
        ({"type": "connection"}, 'needs "provider"'),
        ({"type": "connection", "provider": "theirs"}, "no connection provider named &#x27;theirs&#x27;"),
        ({"type": "token_exchange", "provider": "gh"}, 'needs "audience"'),
        ({"type": "connection", "provider": "gh", "audience": "x"}, "takes only"),
        ({"type": "connection", "provider": "gh", "scopes": "repo"}, "list of scope strings"),
        ({"type": "bearer", "secret": "s"}, "must be"),
    ],
)
def test_the_admin_names_what_is_wrong_with_a_user_credential(
    acme: Tenant, providers: None, acme_admin_client: Client, credential: dict[str, Any], problem: str
) -> None:
    page = acme_admin_client.post(
        "/admin/tools_app/upstreamserver/add/", _form(acme, user_credential=json.dumps(credential))
    )
    assert page.status_code == 200
    assert problem.replace('"', "&quot;") in page.content.decode()
    assert not UpstreamServer.objects.filter(name="mail").exists()


def test_the_admin_saves_a_user_credential_of_the_tenants_provider(
    acme: Tenant, providers: None, acme_admin_client: Client
) -> None:
    credential = {"type": "token_exchange", "provider": "gh", "audience": "https://mcp.example.com/mcp"}
    saved = acme_admin_client.post(
        "/admin/tools_app/upstreamserver/add/", _form(acme, user_credential=json.dumps(credential))
    )
    assert saved.status_code == 302, saved.content.decode()
    server = UpstreamServer.objects.get(name="mail")
    assert server.user_credential == credential
    assert server.user_credential_spec is not None and server.user_credential_spec.audience == credential["audience"]


def test_a_packaged_server_takes_no_user_credential(acme: Tenant, providers: None) -> None:
    server = UpstreamServer(
        tenant=acme,
        name="pkg",
        kind=UpstreamServer.Kind.NPM,
        package="some-server",
        version="1.0.0",
        user_credential={"type": "connection", "provider": "gh"},
    )
    with pytest.raises(ValidationError) as refused:
        server.full_clean()
    assert "needs a URL" in str(refused.value.message_dict["user_credential"])


def test_an_http_tool_and_an_upstream_refuse_the_same_shapes_alike(acme: Tenant, providers: None) -> None:
    bad = {"type": "token_exchange", "provider": "gh", "scopes": []}
    with pytest.raises(BackendConfigError, match='needs "audience"'):
        validate_http({"url": "https://api.example.com/", "auth": bad})
    server = UpstreamServer(tenant=acme, name="u", url="https://mcp.example.com/mcp", user_credential=bad)
    with pytest.raises(ValidationError, match='needs "audience"'):
        server.full_clean()


def test_add_upstream_refuses_a_bad_user_credential(acme: Tenant, providers: None) -> None:
    base = ["add_upstream", "mail", "--tenant", "acme", "--url", "https://mcp.example.com/mcp"]
    with pytest.raises(CommandError, match="not JSON"):
        call_command(*base, "--user-credential", "{connection")
    with pytest.raises(CommandError, match="no connection provider named 'theirs'"):
        call_command(*base, "--user-credential", json.dumps({"type": "connection", "provider": "theirs"}))
    with pytest.raises(CommandError, match="no secret named 'nope'"):
        call_command(*base, "--bearer-secret", "nope")
    assert not UpstreamServer.objects.filter(name="mail").exists()


# Attack: a tenant admin setting a user credential on a server not of their tenant (a platform
# server, another tenant's). Only the admin edits upstream servers (the REST API has no upstream
# endpoint): such a server is missing to them (404), and an add or a move naming the platform
# or another tenant is refused with the tenant field's error. Nothing changes.
CREDENTIAL = {"type": "connection", "provider": "gh"}


@pytest.mark.parametrize("owner", ["platform", "globex"])
def test_a_tenant_admin_cannot_set_a_user_credential_on_a_server_not_of_their_tenant(
    acme: Tenant, globex: Tenant, providers: None, acme_admin_client: Client, owner: str
) -> None:
    tenant = globex if owner == "globex" else None
    server = UpstreamServer.objects.create(tenant=tenant, name="mail", url="https://mcp.example.com/mcp")
    before = UpstreamServer.objects.filter(pk=server.pk).values().get()
    url = f"/admin/tools_app/upstreamserver/{server.pk}/change/"
    assert acme_admin_client.get(url).status_code == 404
    form = _form(acme, tenant=tenant.pk if tenant else "", user_credential=json.dumps(CREDENTIAL))
    assert acme_admin_client.post(url, form).status_code == 404
    assert UpstreamServer.objects.filter(pk=server.pk).values().get() == before


@pytest.mark.parametrize("owner", ["platform", "globex"])
def test_a_tenant_admin_cannot_add_a_server_with_a_user_credential_for_another_owner(
    acme: Tenant, globex: Tenant, providers: None, acme_admin_client: Client, owner: str
) -> None:
    tenant, error = (globex.pk, "Select a valid choice") if owner == "globex" else ("", "This field is required")
    form = _form(acme, tenant=tenant, user_credential=json.dumps(CREDENTIAL))
    page = acme_admin_client.post("/admin/tools_app/upstreamserver/add/", form)
    assert page.status_code == 200  # the form again, with the tenant field's error
    assert error in page.content.decode()
    assert not UpstreamServer.objects.exists()


def test_a_tenant_admin_cannot_move_their_server_to_the_platform(
    acme: Tenant, providers: None, acme_admin_client: Client
) -> None:
    server = UpstreamServer.objects.create(tenant=acme, name="mail", url="https://mcp.example.com/mcp")
    form = _form(acme, tenant="", user_credential=json.dumps(CREDENTIAL))
    page = acme_admin_client.post(f"/admin/tools_app/upstreamserver/{server.pk}/change/", form)
    assert page.status_code == 200
    assert "This field is required" in page.content.decode()
    server.refresh_from_db()
    assert server.tenant_id == acme.pk and server.user_credential == {}
