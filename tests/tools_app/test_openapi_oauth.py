"""OAuth in OpenAPI documents: client credentials become the http backend's
``oauth2_client_credentials`` auth, schemes a user consents to (authorization code, implicit,
password, OpenID Connect) per-user connections at a named, matched or expected provider, never
tools without auth. The calls themselves are tested live in tests/connections."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from oauth.connections.services import provider_save
from tenants.models import Tenant
from tools_app.backends.base import BackendConfigError
from tools_app.backends.http.backend import check_references, validate_config
from tools_app.backends.vault import secret_set
from tools_app.catalog.models import PendingDefinition, Tool
from tools_app.catalog.validation import tool_field_errors

AUTH_URL = "https://login.crm.example/oauth/authorize"
TOKEN_URL = "https://login.crm.example/oauth/token"


def _document(schemes: dict[str, Any], security: list[dict[str, list[str]]]) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "CRM", "version": "1"},
        "servers": [{"url": "https://api.crm.example/v2"}],
        "components": {"securitySchemes": schemes},
        "security": security,
        "paths": {
            "/contacts": {
                "get": {"operationId": "listContacts", "responses": {"200": {"description": "ok"}}},
                "post": {
                    "operationId": "addContact",
                    "security": [{name: ["contacts:write"] for name in schemes}],
                    "responses": {"201": {"description": "made"}},
                },
            },
            "/health": {"get": {"operationId": "health", "security": [], "responses": {"200": {"description": "ok"}}}},
        },
    }


USER = {
    "user": {
        "type": "oauth2",
        "flows": {
            "authorizationCode": {
                "authorizationUrl": AUTH_URL,
                "tokenUrl": TOKEN_URL,
                "scopes": {"contacts:read": "", "contacts:write": ""},
            }
        },
    }
}
MACHINE = {
    "machine": {
        "type": "oauth2",
        "flows": {"clientCredentials": {"tokenUrl": "oauth/token", "scopes": {"contacts:read": ""}}},
    }
}
OIDC = {
    "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://id.crm.example/.well-known/openid-configuration"}
}


def _run(tmp_path: Path, document: dict[str, Any], *args: str) -> tuple[str, str]:
    path = tmp_path / "crm.json"
    path.write_text(json.dumps(document))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_openapi", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _auth(tenant: Tenant, name: str) -> Any:
    return Tool.objects.get(tenant=tenant, name=name).backend_config.get("auth")


@pytest.mark.django_db
def test_client_credentials_need_the_client_id_and_secret_then_carry_each_operations_scopes(
    tmp_path: Path, acme: Tenant
) -> None:
    document = _document(MACHINE, [{"machine": ["contacts:read"]}])
    _, err = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "a_", "--dry-run")
    assert (
        "note: security scheme 'machine': OAuth2 client credentials at https://api.crm.example/v2/oauth/token: give "
        "the client ID (--client-id) and store the client secret as 'a-machine' in the vault" in err
    )
    secret_set(tenant=acme, name="a-machine", value="machine-client-secret-xyz")
    out, err = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "a_", "--client-id", "crm-bot")
    assert len(out.splitlines()) == 3
    assert "OAuth2 client credentials: tokens from https://api.crm.example/v2/oauth/token" in err
    base = {
        "type": "oauth2_client_credentials",
        "token_url": "https://api.crm.example/v2/oauth/token",  # relative to the server, as OpenAPI says
        "client_id": "crm-bot",
        "secret": "a-machine",
    }
    assert _auth(acme, "a_listContacts") == {**base, "scopes": ["contacts:read"]}
    assert _auth(acme, "a_addContact") == {**base, "scopes": ["contacts:write"]}  # the operation's own
    assert _auth(acme, "a_health") is None  # security: []


@pytest.mark.django_db
def test_swagger_2_application_flow_is_client_credentials(tmp_path: Path, acme: Tenant) -> None:
    document = {
        "swagger": "2.0",
        "info": {"title": "Old", "version": "1"},
        "host": "old.example",
        "basePath": "/api",
        "securityDefinitions": {
            "app": {"type": "oauth2", "flow": "application", "tokenUrl": "https://old.example/token", "scopes": {}}
        },
        "security": [{"app": []}],
        "paths": {"/items": {"get": {"operationId": "items", "responses": {"200": {"description": "ok"}}}}},
    }
    secret_set(tenant=acme, name="old-app", value="old-secret")
    _run(tmp_path, document, "--tenant", acme.slug, "--name", "old", "--client-id", "old-client")
    assert _auth(acme, "items") == {
        "type": "oauth2_client_credentials",
        "token_url": "https://old.example/token",
        "client_id": "old-client",
        "secret": "old-app",
    }


@pytest.mark.django_db
def test_a_user_flow_uses_the_provider_whose_endpoints_match_and_never_another_tenants(
    tmp_path: Path, acme: Tenant, globex: Tenant
) -> None:
    provider_save(
        tenant=globex,
        name="crm",
        fields={"client_id": "g", "authorization_endpoint": AUTH_URL, "token_endpoint": TOKEN_URL},
    )
    provider_save(tenant=None, name="crm-platform", fields={"client_id": "p", "issuer": "https://login.crm.example"})
    document = _document(USER, [{"user": ["contacts:read"]}])
    _, err = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "u_")
    expected = {"authorization_url": AUTH_URL, "token_url": TOKEN_URL}
    # globex's provider matches exactly but is not acme's: the platform's, under whose issuer the URLs lie.
    assert _auth(acme, "u_listContacts") == {
        "type": "connection",
        "provider": "crm-platform",
        "scopes": ["contacts:read"],
        "expected_provider": expected,
    }
    assert _auth(acme, "u_addContact")["scopes"] == ["contacts:write"]
    assert "each user's own account at connection provider 'crm-platform' (its endpoints or issuer match" in err
    # The tenant's own provider with the very endpoints is a better match than the platform's.
    provider_save(
        tenant=acme,
        name="crm",
        fields={"client_id": "a", "authorization_endpoint": AUTH_URL, "token_endpoint": TOKEN_URL},
    )
    out, _ = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "u_", "--approve")
    assert out.splitlines()[0] == "updated u_listContacts  GET /contacts  (backend_config)"
    assert _auth(acme, "u_listContacts")["provider"] == "crm"


@pytest.mark.django_db
def test_the_provider_named_by_the_import_wins_and_an_unknown_one_is_refused(tmp_path: Path, acme: Tenant) -> None:
    provider_save(tenant=acme, name="corp-sso", fields={"client_id": "c", "issuer": "https://sso.corp.example"})
    document = _document(OIDC, [{"oidc": []}])
    with pytest.raises(CommandError, match="--connection-provider: there is no connection provider named 'nope'"):
        _run(tmp_path, document, "--tenant", acme.slug, "--connection-provider", "nope")
    _, err = _run(tmp_path, document, "--tenant", acme.slug, "--connection-provider", "corp-sso")
    assert _auth(acme, "listContacts") == {
        "type": "connection",
        "provider": "corp-sso",
        "expected_provider": {"openid_connect_url": "https://id.crm.example/.well-known/openid-configuration"},
    }
    assert "OpenID Connect: each user's own account at connection provider 'corp-sso' (as the import asked)" in err


@pytest.mark.django_db
def test_without_a_provider_the_tools_name_the_expected_one_and_registering_it_changes_no_tool(
    tmp_path: Path, acme: Tenant
) -> None:
    document = _document({**OIDC, **USER}, [{"oidc": ["profile"]}, {"user": []}])
    out, err = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "n_")
    assert len(out.splitlines()) == 3
    auth = _auth(acme, "n_listContacts")
    assert auth["type"] == "connection" and auth["provider"] == "n-oidc" and auth["scopes"] == ["profile"]
    assert (
        "OpenID Connect: no connection provider is registered for it. The tools need each user's own account at "
        "provider 'n-oidc' and answer an error until it exists" in err
    )
    assert (
        "python manage.py add_provider n-oidc --tenant acme --issuer https://id.crm.example --client-id CLIENT_ID "
        "--client-secret-env VARIABLE_HOLDING_THE_SECRET" in err
    )
    assert "add_provider n-user --tenant acme --authorization-endpoint " + AUTH_URL + " --token-endpoint " in err
    # The admin registers it as the note says: a re-import finds it by name and changes nothing.
    provider_save(tenant=acme, name="n-oidc", fields={"client_id": "c", "issuer": "https://id.crm.example"})
    out, err = _run(tmp_path, document, "--tenant", acme.slug, "--prefix", "n_")
    assert out == "" and "(document unchanged)" in err
    assert "connection provider 'n-oidc' (registered under the expected name)" in err
    assert not PendingDefinition.objects.exists()


@pytest.mark.django_db
def test_several_matching_providers_are_not_guessed_between(tmp_path: Path, acme: Tenant) -> None:
    for name in ("crm-eu", "crm-us"):
        provider_save(tenant=acme, name=name, fields={"client_id": name, "issuer": "https://login.crm.example"})
    _, err = _run(tmp_path, _document(USER, [{"user": []}]), "--tenant", acme.slug, "--name", "crm")
    assert _auth(acme, "listContacts")["provider"] == "crm-user"
    assert "several connection providers match (crm-eu, crm-us), so none is chosen" in err


@pytest.mark.django_db
def test_http_settings_for_client_credentials_and_expected_providers(acme: Tenant, globex: Tenant) -> None:
    base = {"method": "GET", "url": "https://api.example.com/me"}
    good = {"type": "oauth2_client_credentials", "token_url": TOKEN_URL, "client_id": "c", "secret": "s"}
    validate_config({**base, "auth": good})
    validate_config({**base, "auth": {**good, "scopes": ["a"], "auth_method": "client_secret_post", "audience": "x"}})
    for bad in (
        {**good, "token_url": "ftp://x.example/token"},
        {**good, "token_url": "https://user:pw@x.example/token"},
        {**good, "client_id": ""},
        {**good, "secret": None},
        {**good, "auth_method": "private_key_jwt"},
        {**good, "scopes": "a b"},
        {**good, "username": "x"},
        {"type": "connection", "provider": "p", "expected_provider": {"token_url": "not a url"}},
        {"type": "connection", "provider": "p", "expected_provider": {"issuer": "https://x.example"}},
    ):
        with pytest.raises(BackendConfigError):
            validate_config({**base, "auth": bad})
    with pytest.raises(BackendConfigError, match="no secret named 's'"):
        check_references({**base, "auth": good}, tenant_id=acme.pk)
    secret_set(tenant=acme, name="s", value="v")
    check_references({**base, "auth": good}, tenant_id=acme.pk)
    with pytest.raises(BackendConfigError, match="no secret named 's'"):
        check_references({**base, "auth": good}, tenant_id=globex.pk)
    # A provider the API description expects may be registered later; without that, it must exist.
    waiting = {"type": "connection", "provider": "later", "expected_provider": {"token_url": TOKEN_URL}}
    check_references({**base, "auth": waiting}, tenant_id=acme.pk)
    with pytest.raises(BackendConfigError, match="no connection provider named 'later'"):
        check_references({**base, "auth": {"type": "connection", "provider": "later"}}, tenant_id=acme.pk)


@pytest.mark.django_db
def test_rest_and_admin_take_the_provider_and_client_id(
    acme: Tenant, globex: Tenant, make_staff: Any, acme_admin_client: Any
) -> None:
    provider_save(tenant=globex, name="theirs", fields={"client_id": "c", "issuer": "https://login.crm.example"})
    api = APIClient()
    api.force_login(make_staff("acme-api-admin", acme))
    document = _document({**USER, **MACHINE}, [{"user": []}])
    body = {"tenant": acme.slug, "document": json.dumps(document), "dry_run": True, "connection_provider": "theirs"}
    refused = api.post("/api/v1/openapi-imports/", body, format="json")
    assert (
        refused.status_code == 400
        and "no connection provider named 'theirs'" in refused.json()["connection_provider"][0]
    )
    provider_save(tenant=acme, name="mine", fields={"client_id": "c", "issuer": "https://login.crm.example"})
    secret_set(tenant=acme, name="crm-machine", value="v")
    body = {**body, "connection_provider": "mine", "client_id": "bot", "dry_run": False}
    done = api.post("/api/v1/openapi-imports/", body, format="json")
    assert done.status_code == 201, done.content
    assert any("connection provider 'mine' (as the import asked)" in note for note in done.json()["notes"])
    assert _auth(acme, "listContacts")["provider"] == "mine"

    page = "/admin/tools_app/openapisource/add/"
    form = {"tenant": acme.pk, "text": json.dumps(copy.deepcopy(document)), "name_prefix": "adm_"}
    answer = acme_admin_client.post(page, {**form, "connection_provider": "theirs", "_preview": "Preview"})
    assert b"no connection provider named" in answer.content and not Tool.objects.filter(name__startswith="adm_")
    done_page = acme_admin_client.post(
        page, {**form, "connection_provider": "mine", "client_id": "bot", "_import": "Import"}
    )
    assert done_page.status_code == 302
    assert _auth(acme, "adm_listContacts")["provider"] == "mine"


@pytest.mark.django_db
def test_swagger_2_access_code_and_unusable_urls_still_give_a_connection(tmp_path: Path, acme: Tenant) -> None:
    document = {
        "swagger": "2.0",
        "info": {"title": "Old", "version": "1"},
        "host": "old.example",
        "securityDefinitions": {
            "code": {
                "type": "oauth2",
                "flow": "accessCode",
                "authorizationUrl": "https://old.example/login",
                "tokenUrl": "https://old.example/token",
                "scopes": {"x": ""},
            },
            "broken": {"type": "oauth2", "flow": "implicit", "authorizationUrl": "mailto:nobody", "scopes": {}},
        },
        "paths": {
            "/a": {
                "get": {"operationId": "a", "security": [{"code": ["x"]}], "responses": {"200": {"description": ""}}}
            },
            "/b": {
                "get": {"operationId": "b", "security": [{"broken": []}], "responses": {"200": {"description": ""}}}
            },
        },
    }
    _, err = _run(tmp_path, document, "--tenant", acme.slug, "--name", "old")
    assert _auth(acme, "a") == {
        "type": "connection",
        "provider": "old-code",
        "scopes": ["x"],
        "expected_provider": {
            "authorization_url": "https://old.example/login",
            "token_url": "https://old.example/token",
        },
    }
    # No usable URL: still never without auth, and the command says to give the issuer.
    assert _auth(acme, "b") == {"type": "connection", "provider": "old-broken", "expected_provider": {}}
    assert "add_provider old-broken --tenant acme --issuer ISSUER_URL" in err


@pytest.mark.django_db
def test_the_rest_api_and_the_admin_check_client_credentials_like_any_auth(
    acme: Tenant, make_staff: Any, acme_admin_client: Any
) -> None:
    api = APIClient()
    api.force_login(make_staff("acme-tools-admin", acme))
    auth = {"type": "oauth2_client_credentials", "token_url": TOKEN_URL, "client_id": "bot", "secret": "crm-bot"}
    body = {
        "tenant": acme.slug,
        "name": "contacts",
        "description": "Lists contacts.",
        "input_schema": {"type": "object"},
        "backend_kind": "http",
        "backend_config": {"url": "https://api.crm.example/contacts", "auth": {**auth, "token_url": "ftp://x"}},
    }
    refused = api.post("/api/v1/tools/", body, format="json")
    assert refused.status_code == 400 and "token_url" in refused.json()["backend_config"][0]
    missing = api.post(
        "/api/v1/tools/", {**body, "backend_config": {**body["backend_config"], "auth": auth}}, format="json"
    )
    assert missing.status_code == 400 and "no secret named 'crm-bot'" in missing.json()["backend_config"][0]
    secret_set(tenant=acme, name="crm-bot", value="the-client-secret")
    made = api.post(
        "/api/v1/tools/", {**body, "backend_config": {**body["backend_config"], "auth": auth}}, format="json"
    )
    assert made.status_code == 201, made.content
    assert "the-client-secret" not in made.content.decode()
    errors = tool_field_errors(
        tenant_id=acme.pk,
        input_schema={"type": "object"},
        output_schema=None,
        icons=[],
        tags=[],
        backend_kind="http",
        backend_config={"url": "https://api.crm.example/contacts", "auth": {**auth, "client_id": ""}},
        description="x",
    )
    assert "client_id" in errors["backend_config"][0]  # the admin's form shows the same message
