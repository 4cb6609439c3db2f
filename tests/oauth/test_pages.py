"""The people-facing pages of the embedded authorization server: sign-in redirect, consent
naming the tenant, client and scopes, and "your authorizations"."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from oauth.models import Grant, OAuthClient
from oauth.services import client_preregister, oauth_settings_set
from tenants.services import membership_set

REDIRECT = "http://127.0.0.1:7777/cb"
# Authlib serves OAuth over https, or plain http on loopback only (RFC 8252): the test client
# comes as "localhost".
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


@pytest.fixture
def setup(acme: Any, globex: Any) -> dict[str, Any]:
    oauth_settings_set(tenant=acme, changes={"enabled": True})
    users = {name: get_user_model().objects.create_user(name, password="pw") for name in ("ada", "bob")}
    membership_set(tenant=acme, user=users["ada"], role="viewer")
    client, _ = client_preregister(tenant=acme, name="Ada's IDE", redirect_uris=[REDIRECT])
    return {"users": users, "client": client}


def _authorize_url(client: OAuthClient, **extra: str) -> str:
    from urllib.parse import urlencode

    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "state": "xyz",
        **extra,
    }
    return f"/oauth/acme/authorize?{urlencode(params)}"


def test_sign_in_then_consent_names_tenant_client_and_scopes(setup):
    browser = Client(HTTP_HOST="localhost")
    url = _authorize_url(setup["client"], scope="tools:list")
    assert browser.get(url).headers["Location"].startswith("/oauth/login/?next=")
    browser.force_login(setup["users"]["ada"])
    page = browser.get(url)
    assert page.status_code == 200, page.content.decode()[-600:]
    text = page.content.decode()
    assert "Acme Corp" in text and "Ada&#x27;s IDE" in text and "tools:list" in text and "tools:call" not in text
    approved = browser.post(url, {"decision": "approve"})
    location = urlsplit(approved.headers["Location"])
    query = parse_qs(location.query)
    assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT
    assert query["state"] == ["xyz"] and query["iss"] == ["http://localhost/oauth/acme"] and query["code"]
    # Asked again for what was granted: no page, a code straight away.
    again = browser.get(url)
    assert again.status_code == 302 and "code=" in again.headers["Location"]


def test_pkce_is_required_and_only_s256(setup):
    browser = Client(HTTP_HOST="localhost")
    browser.force_login(setup["users"]["ada"])
    plain = browser.get(_authorize_url(setup["client"], code_challenge_method="plain"))
    assert plain.status_code == 302 and "error=invalid_request" in plain.headers["Location"]
    assert "iss=" in plain.headers["Location"]
    wrong_resource = browser.get(_authorize_url(setup["client"], resource="http://localhost/mcp/globex"))
    assert "error=invalid_target" in wrong_resource.headers["Location"]


def test_denying_sends_access_denied(setup):
    browser = Client(HTTP_HOST="localhost")
    browser.force_login(setup["users"]["ada"])
    denied = browser.post(_authorize_url(setup["client"]), {"decision": "deny"})
    assert "error=access_denied" in denied.headers["Location"]
    assert not Grant.objects.exists()


def test_your_authorizations_lists_and_revokes_only_your_own(setup):
    acme_grant = Grant.objects.create(
        tenant=setup["client"].tenant, user=setup["users"]["ada"], client=setup["client"], scope="tools:list"
    )
    bob = Client(HTTP_HOST="localhost")
    bob.force_login(setup["users"]["bob"])
    assert "Ada&#x27;s IDE" not in bob.get("/oauth/authorizations/").content.decode()
    bob.post("/oauth/authorizations/", {"grant": acme_grant.pk})
    assert Grant.objects.get(pk=acme_grant.pk).revoked_at is None
    ada = Client(HTTP_HOST="localhost")
    ada.force_login(setup["users"]["ada"])
    assert "Ada&#x27;s IDE" in ada.get("/oauth/authorizations/").content.decode()
    ada.post("/oauth/authorizations/", {"grant": acme_grant.pk})
    assert Grant.objects.get(pk=acme_grant.pk).revoked_at is not None


def test_no_embedded_server_without_oauth(globex):
    assert Client(HTTP_HOST="localhost").get("/.well-known/oauth-authorization-server/oauth/globex").status_code == 404
    assert Client(HTTP_HOST="localhost").get("/.well-known/oauth-protected-resource/mcp/globex").status_code == 404
    assert Client(HTTP_HOST="localhost").get("/.well-known/oauth-protected-resource").status_code == 404
