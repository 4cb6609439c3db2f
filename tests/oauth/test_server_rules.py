"""The embedded authorization server's rules, in process: signing keys per tenant (``kid``,
rotation, the first key made once), what the consent form approves, RFC 8252 redirect URIs,
metadata document clients and the client cap, and pages that no other site may frame."""

from __future__ import annotations

import io
import threading
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from joserfc import jwt
from joserfc.jws import extract_compact

from oauth.models import Grant, OAuthClient, SigningKey
from oauth.server.clients import find_client
from oauth.services import client_preregister, oauth_settings_set
from oauth.signing import public_jwks, signing_key
from tenants.auth import tenant_directory
from tenants.models import Tenant
from tenants.principal import Principal
from tenants.services import membership_set, tenant_create

ORIGIN = "http://testserver"
REDIRECT = "http://127.0.0.1:7777/cb"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


@pytest.fixture
def consent(acme: Tenant) -> Grant:
    oauth_settings_set(tenant=acme, changes={"enabled": True})
    user = get_user_model().objects.create_user("ada", password="pw")
    membership_set(tenant=acme, user=user, role="viewer")
    client, _ = client_preregister(tenant=acme, name="Ada's IDE", redirect_uris=[REDIRECT])
    return Grant.objects.create(tenant=acme, user=user, client=client, scope="tools:list tools:call")


def _token(grant: Grant, *, kid: bool = True, key: Any = None, origin: str = ORIGIN) -> str:
    now = int(time.time())
    payload = {
        "iss": f"{origin}/oauth/{grant.tenant.slug}",
        "aud": f"{origin}/mcp/{grant.tenant.slug}",
        "sub": grant.user.username,
        "client_id": grant.client.client_id,
        "scope": "tools:list",
        "gid": grant.id,
        "iat": now,
        "exp": now + 300,
    }
    key = key or signing_key(grant.tenant)
    header = {"alg": "ES256", "typ": "at+jwt"}
    if kid:
        header["kid"] = key.kid
    return jwt.encode(header, payload, key)


def _authenticate(token: str, slug: str = "acme") -> Principal:
    return async_to_sync(tenant_directory.authenticate)(slug, f"Bearer {token}", ORIGIN)


def _kids(tenant: Tenant) -> set[str]:
    return {key["kid"] for key in public_jwks(tenant.pk)["keys"]}


# --- 1: kid, per-tenant rotation, the first key ---------------------------------------------


def test_rotation_keeps_old_and_new_tokens_good_and_touches_only_that_tenant(consent, globex):
    acme = consent.tenant
    before = _token(consent)
    no_kid = _token(consent, kid=False)  # as tokens were minted before they carried kid
    globex_key = signing_key(globex)
    out = io.StringIO()
    call_command("oauth_rotate_signing_key", "--tenant", "acme", stdout=out)
    assert "acme: new signing key" in out.getvalue() and "globex" not in out.getvalue()
    after = _token(consent)
    assert extract_compact(after.encode()).headers()["kid"] != extract_compact(before.encode()).headers()["kid"]
    for token in (before, no_kid, after):
        assert _authenticate(token).grant_id == consent.id
    assert len(_kids(acme)) == 2
    # Globex kept its key; acme's keys are not globex's.
    assert signing_key(globex).kid == globex_key.kid and _kids(globex) == {globex_key.kid}
    # The retiring key is published until the last token it signed has expired, then dropped.
    SigningKey.objects.filter(tenant=acme, retired_at__isnull=False).update(
        retired_at=timezone.now() - timedelta(seconds=3600 + 11)
    )
    assert _kids(acme) == {extract_compact(after.encode()).headers()["kid"]}


def test_tokens_from_the_server_name_their_key(consent):
    browser = Client(HTTP_HOST="localhost")
    browser.force_login(consent.user)
    verifier = "v" * 64
    import base64
    import hashlib

    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    params = {
        "response_type": "code",
        "client_id": consent.client.client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    location = browser.get(f"/oauth/acme/authorize?{urlencode(params)}").headers["Location"]
    code = parse_qs(urlsplit(location).query)["code"][0]
    answer = browser.post(
        "/oauth/acme/token",
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": consent.client.client_id,
            "code_verifier": verifier,
        },
    )
    assert answer.status_code == 200, answer.content
    header = extract_compact(answer.json()["access_token"].encode()).headers()
    assert header["kid"] == signing_key(consent.tenant).kid
    assert header["kid"] in {key["kid"] for key in browser.get("/oauth/acme/jwks").json()["keys"]}


@pytest.mark.django_db(transaction=True)
def test_simultaneous_first_tokens_make_one_key():
    tenant = tenant_create(slug="fresh", name="Fresh")
    barrier = threading.Barrier(8)
    kids: list[str] = []
    errors: list[BaseException] = []

    def first_token() -> None:
        try:
            barrier.wait()
            kids.append(str(signing_key(tenant).kid))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=first_token) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(kids)) == 1 and SigningKey.objects.filter(tenant=tenant).count() == 1


# --- 5: only "approve" approves -------------------------------------------------------------


@pytest.mark.parametrize("decision", ["yes", "", "APPROVE", "deny"])
def test_consent_approves_only_on_approve(consent, decision):
    Grant.objects.filter(pk=consent.pk).delete()
    browser = Client(HTTP_HOST="localhost")
    browser.force_login(consent.user)
    params = {
        "response_type": "code",
        "client_id": consent.client.client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "state": "s",
    }
    answer = browser.post(f"/oauth/acme/authorize?{urlencode(params)}", {"decision": decision})
    query = parse_qs(urlsplit(answer.headers["Location"]).query)
    assert query.get("error") == ["access_denied"] and "code" not in query
    assert not Grant.objects.filter(tenant=consent.tenant, user=consent.user).exists()


# --- 7: redirect URIs as RFC 8252 says; no framing ------------------------------------------


@pytest.mark.parametrize(
    ("uri", "accepted"),
    [
        ("com.example.app:/cb", True),
        ("com.example.app:/oauth2redirect/example-provider", True),
        ("https://app.example.com/cb", True),
        ("http://127.0.0.1:3030/cb", True),
        ("http://[::1]/cb", True),
        ("http://example.com/cb", False),
        ("ftp://example.com/cb", False),
        ("ws://127.0.0.1/cb", False),
        ("wss://example.com/cb", False),
        ("javascript:alert(1)", False),
        ("myapp:/cb", False),  # not a reverse domain name
        ("https://user@evil.example/cb", False),
    ],
)
def test_registration_redirect_uris(acme, uri, accepted):
    oauth_settings_set(tenant=acme, changes={"enabled": True})
    answer = Client(HTTP_HOST="localhost").post(
        "/oauth/acme/register",
        {"redirect_uris": [uri], "token_endpoint_auth_method": "none", "client_name": "native"},
        content_type="application/json",
    )
    assert answer.status_code == (201 if accepted else 400), answer.content
    assert OAuthClient.objects.filter(tenant=acme, redirect_uris=[uri]).exists() is accepted


def test_no_page_can_be_framed(consent, django_user_model):
    staff = django_user_model.objects.create_superuser("root", password="pw")
    anonymous = Client(HTTP_HOST="localhost")
    signed_in = Client(HTTP_HOST="localhost")
    signed_in.force_login(consent.user)
    admin = Client(HTTP_HOST="localhost")
    admin.force_login(staff)
    Grant.objects.filter(pk=consent.pk).delete()
    params = {
        "response_type": "code",
        "client_id": consent.client.client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
    }
    pages = [
        (anonymous, "/oauth/login/"),
        (signed_in, f"/oauth/acme/authorize?{urlencode(params)}"),  # the consent page
        (signed_in, "/oauth/authorizations/"),
        (anonymous, "/admin/login/"),
        (admin, "/admin/"),
        (anonymous, "/console/login/"),
        (admin, "/console/"),
    ]
    for client, path in pages:
        page = client.get(path)
        assert page.status_code == 200 and page["Content-Type"].startswith("text/html"), path
        assert "frame-ancestors 'none'" in page.get("Content-Security-Policy", ""), path


# --- 4: metadata documents count against the cap ------------------------------------------


def test_metadata_document_clients_count_against_the_cap(acme, settings):
    oauth_settings_set(tenant=acme, changes={"enabled": True})
    client_preregister(tenant=acme, name="one", redirect_uris=[REDIRECT])
    settings.TOOLBAY_OAUTH_MAX_CLIENTS_PER_TENANT = 1
    url = "https://127.0.0.1:9/clients/new.json"  # never fetched: the cap answers first
    assert find_client(acme, url, registration_open=True, admit_new=lambda: True) is None
    # Without the signed-in step's permission nothing is even considered.
    settings.TOOLBAY_OAUTH_MAX_CLIENTS_PER_TENANT = 10
    assert find_client(acme, url, registration_open=True) is None
    assert not OAuthClient.objects.filter(tenant=acme, client_id=url).exists()


# --- 3: /revoke takes access tokens, only genuine ones -------------------------------------


def test_revoking_an_access_token_without_kid_ends_its_consent_and_a_forged_one_nothing(consent):
    from joserfc.jwk import generate_key

    browser = Client(HTTP_HOST="localhost")  # plain http to a loopback name (RFC 8252)
    stranger = generate_key("EC", "P-256", parameters={"alg": "ES256"}, auto_kid=True)
    forged = _token(consent, key=stranger, origin="http://localhost")
    answer = browser.post("/oauth/acme/revoke", {"token": forged, "client_id": consent.client.client_id})
    assert answer.status_code == 200  # RFC 7009: an unknown token is no error...
    consent.refresh_from_db()
    assert consent.revoked_at is None  # ...and ends nothing
    legacy = _token(consent, kid=False, origin="http://localhost")
    answer = browser.post("/oauth/acme/revoke", {"token": legacy, "client_id": consent.client.client_id})
    assert answer.status_code == 200
    consent.refresh_from_db()
    assert consent.revoked_at is not None
