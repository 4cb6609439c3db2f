"""Staff sign in to the console through a real OpenID Connect provider (oidc-provider on
loopback): authorization code + PKCE, state, nonce and ID token checks; groups decide roles
at every sign-in; a callback is honoured once, also when two arrive at the same moment."""

from __future__ import annotations

import base64
import html
import json
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from joserfc import jwt
from joserfc.jwk import RSAKey

from audit.models import AuditEvent
from staff_auth.models import SsoMembership, SsoSignIn, StaffIdentity
from staff_auth.oidc import SsoError, verify_id_token
from tenants.models import Membership
from tenants.services import membership_set
from tests.staff_auth.conftest import CLIENT_ID, REDIRECT_URI, Provider

ALICE = {"email": "alice@example.com", "email_verified": True, "name": "Alice"}


def _provider_sign_in(client: Client, account: str, next_url: str = "/console/") -> str:
    """Starts SSO at Toolbay and signs in at the provider's own pages like a browser would;
    returns the path and query the provider sends the browser back to."""
    start = client.get("/staff/sso/login/", {"next": next_url})
    assert start.status_code == 302, start.content
    location = start["Location"]
    query = parse_qs(urlsplit(location).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"] and query["nonce"]
    with httpx.Client(timeout=10) as browser:
        for _ in range(10):
            if location.startswith(REDIRECT_URI):
                parts = urlsplit(location)
                return f"{parts.path}?{parts.query}"
            page = browser.get(location)
            if page.is_redirect:
                location = urljoin(str(page.url), page.headers["location"])
                continue
            assert page.status_code == 200, page.text
            form = re.search(r'<form[^>]*action="([^"]+)"', page.text)
            assert form is not None, page.text
            fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
            answer = browser.post(
                urljoin(str(page.url), html.unescape(form.group(1))),
                data={**fields, "login": account, "password": "whatever the provider checks"},
            )
            assert answer.is_redirect, answer.text
            location = urljoin(str(answer.url), answer.headers["location"])
    raise AssertionError(f"the provider never sent the browser back (last: {location})")


def _user_id(client: Client) -> int | None:
    value = client.session.get("_auth_user_id")
    return int(value) if value is not None else None


@pytest.mark.django_db
def test_a_staff_member_gets_the_role_their_group_maps_to_and_loses_it_with_the_group(
    sso: Provider, acme: Any, globex: Any
) -> None:
    sso.set_accounts({"alice": {**ALICE, "groups": ["acme-operators"]}})
    client = Client()
    callback = client.get(_provider_sign_in(client, "alice"))
    assert callback.status_code == 302 and callback["Location"] == "/console/"
    assert client.get("/console/").status_code == 200
    user = get_user_model().objects.get(pk=_user_id(client))
    assert user.email == "alice@example.com" and not user.has_usable_password()
    assert not user.is_staff and not user.is_superuser
    membership = Membership.objects.get(user=user)
    assert (membership.tenant, membership.role) == (acme, "operator")
    assert SsoMembership.objects.filter(membership=membership).exists()
    # A membership made by hand is the admin's decision: SSO leaves it alone.
    membership_set(tenant=globex, user=user, role=Membership.Role.VIEWER)

    # Promoted at the provider: tenant admin (which needs the Django admin, so is_staff).
    sso.set_accounts({"alice": {**ALICE, "groups": ["acme-operators", "acme-admins"]}})
    client = Client()
    client.get(_provider_sign_in(client, "alice"))
    user.refresh_from_db()
    assert Membership.objects.get(user=user, tenant=acme).role == "admin" and user.is_staff

    # The group is removed: the next sign-in takes the role (and the staff flag) back.
    sso.set_accounts({"alice": {**ALICE, "groups": []}})
    client = Client()
    assert client.get(_provider_sign_in(client, "alice")).status_code == 302
    assert _user_id(client) == user.pk
    user.refresh_from_db()
    assert not user.is_staff
    assert list(Membership.objects.filter(user=user).values_list("tenant__slug", "role")) == [("globex", "viewer")]
    assert client.get("/console/").status_code == 403  # a viewer may not use the console
    identity = StaffIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject, identity.groups) == (sso.issuer, "alice", [])


@pytest.mark.django_db
def test_platform_admin_group_grants_superuser_and_takes_back_only_what_it_granted(sso: Provider) -> None:
    sso.set_accounts({"root-sso": {"email": "root@example.com", "email_verified": True, "groups": ["toolbay-admins"]}})
    client = Client()
    assert client.get(_provider_sign_in(client, "root-sso", next_url="/admin/")).status_code == 302
    assert client.get("/admin/").status_code == 200
    user = get_user_model().objects.get(pk=_user_id(client))
    assert user.is_superuser and user.is_staff

    sso.set_accounts({"root-sso": {"email": "root@example.com", "email_verified": True, "groups": []}})
    client = Client()
    client.get(_provider_sign_in(client, "root-sso"))
    user.refresh_from_db()
    assert not user.is_superuser and not user.is_staff

    # A superuser made by hand stays one whatever the groups say.
    get_user_model().objects.create_superuser("hand-made", email="hand@example.com", password="x-x-x-x-x")
    sso.set_accounts({"hand": {"email": "hand@example.com", "email_verified": True, "groups": []}})
    client = Client()
    client.get(_provider_sign_in(client, "hand"))
    hand = get_user_model().objects.get(username="hand-made")
    assert _user_id(client) == hand.pk and hand.is_superuser and hand.is_staff


@pytest.mark.django_db
def test_linking_by_email_only_when_the_provider_verified_it(sso: Provider) -> None:
    existing = get_user_model().objects.create_user("bob", email="bob@example.com", password="x-x-x-x-x")
    sso.set_accounts({"mallory": {"email": "bob@example.com", "email_verified": False, "groups": []}})
    client = Client()
    client.get(_provider_sign_in(client, "mallory"))
    assert _user_id(client) not in (None, existing.pk)

    sso.set_accounts({"bob-at-idp": {"email": "Bob@example.com", "email_verified": True, "groups": []}})
    client = Client()
    client.get(_provider_sign_in(client, "bob-at-idp"))
    assert _user_id(client) == existing.pk
    assert StaffIdentity.objects.get(user=existing).subject == "bob-at-idp"


@pytest.mark.django_db
def test_a_replayed_callback_is_refused(sso: Provider) -> None:
    sso.set_accounts({"alice": {**ALICE, "groups": []}})
    client = Client()
    callback = _provider_sign_in(client, "alice")
    assert client.get(callback).status_code == 302
    client.logout()
    replay = client.get(callback)
    assert replay.status_code in (400, 403) and _user_id(client) is None
    # Another browser replaying it is refused before anything is spent.
    stranger = Client()
    answer = stranger.get(callback)
    assert answer.status_code == 400 and "not started in this browser" in answer.content.decode()


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_uses_of_one_callback_give_one_sign_in(sso: Provider) -> None:
    sso.set_accounts({"alice": {**ALICE, "groups": []}})
    first = Client()
    callback = _provider_sign_in(first, "alice")
    second = Client()
    second.cookies = first.cookies  # the same browser session, twice at once
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def use(client: Client) -> None:
        try:
            barrier.wait()
            statuses.append(client.get(callback).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=use, args=(client,)) for client in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [302, 403]
    assert StaffIdentity.objects.count() == 1 and get_user_model().objects.count() == 1


@pytest.mark.django_db
def test_an_id_token_with_another_nonce_is_refused_in_the_flow(sso: Provider) -> None:
    sso.set_accounts({"alice": {**ALICE, "groups": ["acme-operators"]}})
    client = Client()
    callback = _provider_sign_in(client, "alice")
    # As if the token answered another sign-in than the one this browser started.
    SsoSignIn.objects.update(nonce="a-nonce-this-sign-in-never-sent")
    answer = client.get(callback)
    assert answer.status_code == 403 and "nonce" in answer.content.decode()
    assert _user_id(client) is None and not StaffIdentity.objects.exists()


def _b64(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _id_token(provider: Provider, key: RSAKey | None = None, **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "alice", "iat": now, "exp": now + 300, "nonce": "n1"}
    payload.update(claims)
    signing_key = key or provider.key
    return jwt.encode({"alg": "RS256", "kid": "test-provider-key"}, payload, signing_key)


@pytest.mark.django_db
def test_id_token_checks(sso: Provider) -> None:
    assert verify_id_token(_id_token(sso), nonce="n1")["sub"] == "alice"  # the provider's own key: accepted
    refused = {
        "wrong nonce": (_id_token(sso, nonce="other"), "nonce"),
        "wrong audience": (_id_token(sso, aud="another-client"), "aud"),
        "other client among several audiences": (_id_token(sso, aud=[CLIENT_ID, "x"], azp="x"), "azp"),
        "wrong issuer": (_id_token(sso, iss="http://127.0.0.1:1"), "iss"),
        "expired": (_id_token(sso, iat=int(time.time()) - 900, exp=int(time.time()) - 600), "expired"),
        "no nonce": (_id_token(sso, nonce=None), "nonce"),
        "signed by another key with the provider's kid": (
            _id_token(sso, key=RSAKey.generate_key(2048, parameters={"kid": "test-provider-key"})),
            "signature",
        ),
    }
    header, payload, signature = _id_token(sso).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    tampered = _b64({**claims, "sub": "root"})
    refused["tampered payload"] = (f"{header}.{tampered}.{signature}", "signature")
    refused["alg none"] = (f"{_b64({'alg': 'none', 'kid': 'test-provider-key'})}.{payload}.", "signature")
    for case, (token, reason) in refused.items():
        with pytest.raises(SsoError) as error:
            verify_id_token(token, nonce="n1")
        assert reason in str(error.value), (case, str(error.value))


@pytest.mark.django_db
def test_the_sign_in_pages_offer_sso_only_when_configured(sso: Provider, settings: Any) -> None:
    for page in ("/console/login/", "/admin/login/", "/oauth/login/"):
        assert 'href="/staff/sso/login/' in Client().get(page).content.decode()
    settings.TOOLBAY_SSO_ISSUER = ""
    assert "/staff/sso/login/" not in Client().get("/console/login/").content.decode()
    assert Client().get("/staff/sso/login/").status_code == 404


@pytest.mark.django_db
def test_a_sign_in_cancelled_at_the_provider_signs_no_one_in(sso: Provider) -> None:
    client = Client()
    start = client.get("/staff/sso/login/")
    with httpx.Client(timeout=10) as browser:
        page = browser.get(start["Location"], follow_redirects=True)
        abort = re.search(r'href="([^"]+/abort)"', page.text)
        assert abort is not None, page.text
        back = browser.get(urljoin(str(page.url), html.unescape(abort.group(1))), follow_redirects=False)
        while not back.headers["location"].startswith(REDIRECT_URI):
            back = browser.get(urljoin(str(back.url), back.headers["location"]), follow_redirects=False)
    parts = urlsplit(back.headers["location"])
    answer = client.get(f"{parts.path}?{parts.query}")
    assert answer.status_code == 403 and "access_denied" in answer.content.decode()
    assert _user_id(client) is None


@pytest.mark.django_db
def test_sso_keeps_a_tenants_last_owner_and_audits_what_it_changes(sso: Provider, acme: Any) -> None:
    sso.set_accounts({"olive": {"email": "olive@example.com", "email_verified": True, "groups": ["acme-owners"]}})
    client = Client()
    client.get(_provider_sign_in(client, "olive"))
    user = get_user_model().objects.get(pk=_user_id(client))
    membership = Membership.objects.get(user=user, tenant=acme)
    assert membership.role == "owner"
    assert AuditEvent.objects.filter(object_type="tenants.Membership", object_id=str(membership.pk)).exists()

    sso.set_accounts({"olive": {"email": "olive@example.com", "email_verified": True, "groups": []}})
    client = Client()
    assert client.get(_provider_sign_in(client, "olive")).status_code == 302
    assert Membership.objects.get(user=user, tenant=acme).role == "owner"  # nobody else could run acme
