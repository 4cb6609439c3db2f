"""Codes and refresh tokens are good for one use, even at the same moment; a replayed code, a
reused refresh token and RFC 7009 ``/revoke`` end the consent, and its access tokens are
refused on every process within seconds; rotation keeps tokens good; metadata documents are
never fetched for the token endpoint; forwarded headers are not trusted from just anyone.

Two live uvicorn processes (``oauth_server``, ``oauth_server_2``) share the database and Redis;
simultaneous requests are spread over both."""

from __future__ import annotations

import base64
import hashlib
import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest
from django.core.management import call_command
from joserfc.jws import extract_compact

from mcp_platform.redis_clients import sync_redis
from oauth.models import Grant, OAuthClient
from oauth.services import client_preregister
from tenants.models import Tenant
from tests.mcp.conftest import LiveServer
from tests.mcp.wire import headers, rpc
from tests.oauth.conftest import OAuthWorld, Person
from tests.poll import wait_for

pytestmark = pytest.mark.live

T = TypeVar("T")
REDIRECT = "http://127.0.0.1:9/callback"
VERIFIER = "lifecycle-verifier-" + "x" * 40
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()
SIMULTANEOUS = 100
INITIALIZE = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}})


@pytest.fixture
def servers(oauth_server: LiveServer, oauth_server_2: LiveServer) -> list[LiveServer]:
    return [oauth_server, oauth_server_2]


@pytest.fixture
def client_id(orm: None, oauth_world: OAuthWorld) -> str:
    row, _ = client_preregister(tenant=Tenant.objects.get(slug="oauth-a"), name="lifecycle", redirect_uris=[REDIRECT])
    return row.client_id


@pytest.fixture
def person() -> Iterator[Person]:
    someone = Person("olivia")
    yield someone
    someone.close()


def _code(person: Person, server: LiveServer, client_id: str) -> str:
    url = httpx.URL(
        f"{server.url}/oauth/oauth-a/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": CHALLENGE,
            "code_challenge_method": "S256",
            "scope": "tools:list tools:call",
        },
    )
    return person.approve(str(url))["code"]


def _redeem(server: LiveServer, client_id: str, code: str) -> httpx.Response:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": VERIFIER,
    }
    return httpx.post(f"{server.url}/oauth/oauth-a/token", data=data, timeout=60)


def _refresh(server: LiveServer, client_id: str, refresh_token: str) -> httpx.Response:
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
    return httpx.post(f"{server.url}/oauth/oauth-a/token", data=data, timeout=60)


def _tokens(person: Person, servers: list[LiveServer], client_id: str) -> dict[str, Any]:
    answer = _redeem(servers[0], client_id, _code(person, servers[0], client_id))
    assert answer.status_code == 200, answer.text
    tokens: dict[str, Any] = answer.json()
    return tokens


def _mcp_status(server: LiveServer, access_token: str) -> int:
    return httpx.post(
        server.endpoint("oauth-a"), json=INITIALIZE, headers=headers(access_token), timeout=30
    ).status_code


def _refused_everywhere(servers: list[LiveServer], access_token: str) -> bool:
    return all(_mcp_status(server, access_token) == 401 for server in servers)


def _at_once(count: int, call: Callable[[int], T]) -> list[T]:
    """``count`` calls released at the same moment (each on its own thread and connection)."""
    barrier = threading.Barrier(count)

    def released(index: int) -> T:
        barrier.wait()
        return call(index)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(released, range(count)))


def _only_refusals(answers: list[httpx.Response]) -> None:
    """Every answer but the winner's is invalid_grant, or a 503: a hundred requests at once
    open a hundred database connections, past what the test database (shared, 100 at
    most) gives; the server then says "retry later", which is no token set either."""
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {400, 503}, statuses
    assert all(answer.json()["error"] == "invalid_grant" for answer in answers if answer.status_code == 400)
    assert statuses.count(400) >= len(answers) // 2, statuses


def _grant_of(client_id: str) -> Grant:
    return Grant.objects.filter(client__client_id=client_id).latest("created_at")


# --- 2 and 3: single use, at the same moment and after ---------------------------------------


def test_one_code_redeemed_100_times_at_once_gives_one_token_set(servers, client_id, person):
    code = _code(person, servers[0], client_id)
    answers = _at_once(SIMULTANEOUS, lambda i: _redeem(servers[i % 2], client_id, code))
    granted = [answer for answer in answers if answer.status_code == 200]
    assert len(granted) == 1, [answer.status_code for answer in answers]
    _only_refusals([answer for answer in answers if answer not in granted])
    # The other 99 were replays: the consent is over, and the one token set with it.
    assert _grant_of(client_id).revoked_at is not None
    wait_for(lambda: _refused_everywhere(servers, granted[0].json()["access_token"]), timeout=2)
    assert _refresh(servers[1], client_id, granted[0].json()["refresh_token"]).status_code == 400


def test_one_refresh_token_used_100_times_at_once_gives_one_token_set(servers, client_id, person):
    tokens = _tokens(person, servers, client_id)
    answers = _at_once(SIMULTANEOUS, lambda i: _refresh(servers[i % 2], client_id, tokens["refresh_token"]))
    granted = [answer for answer in answers if answer.status_code == 200]
    assert len(granted) == 1, [answer.status_code for answer in answers]
    _only_refusals([answer for answer in answers if answer not in granted])
    assert _grant_of(client_id).revoked_at is not None  # reuse: someone holds a copy
    wait_for(lambda: _refused_everywhere(servers, granted[0].json()["access_token"]), timeout=2)


def test_a_replayed_code_ends_the_tokens_of_its_first_redemption(servers, client_id, person):
    code = _code(person, servers[0], client_id)
    first = _redeem(servers[0], client_id, code)
    assert first.status_code == 200
    access, refresh = first.json()["access_token"], first.json()["refresh_token"]
    assert [_mcp_status(server, access) for server in servers] == [200, 200]
    replay = _redeem(servers[1], client_id, code)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    wait_for(lambda: _refused_everywhere(servers, access), timeout=2, message="the first redemption's token refused")
    assert _refresh(servers[0], client_id, refresh).status_code == 400


def test_a_reused_refresh_token_ends_the_newer_tokens_too(servers, client_id, person):
    tokens = _tokens(person, servers, client_id)
    newer = _refresh(servers[0], client_id, tokens["refresh_token"])
    assert newer.status_code == 200
    assert [_mcp_status(server, newer.json()["access_token"]) for server in servers] == [200, 200]
    assert _refresh(servers[1], client_id, tokens["refresh_token"]).status_code == 400  # the old one, again
    wait_for(lambda: _refused_everywhere(servers, newer.json()["access_token"]), timeout=2)
    assert _refresh(servers[0], client_id, newer.json()["refresh_token"]).status_code == 400


@pytest.mark.parametrize("which", ["refresh_token", "access_token"])
def test_revoke_ends_the_consent_on_both_processes_within_2_seconds(servers, client_id, person, which):
    tokens = _tokens(person, servers, client_id)
    access = tokens["access_token"]
    assert [_mcp_status(server, access) for server in servers] == [200, 200]  # both now remember it
    revoked = httpx.post(
        f"{servers[1].url}/oauth/oauth-a/revoke",
        data={"token": tokens[which], "token_type_hint": which, "client_id": client_id},
    )
    assert revoked.status_code == 200, revoked.text
    started = time.monotonic()
    wait_for(lambda: _refused_everywhere(servers, access), timeout=2, message="the access token refused on both")
    assert time.monotonic() - started < 2
    assert _refresh(servers[0], client_id, tokens["refresh_token"]).status_code == 400


def test_another_clients_revocation_changes_nothing(servers, client_id, person, orm):
    tokens = _tokens(person, servers, client_id)
    other, _ = client_preregister(tenant=Tenant.objects.get(slug="oauth-a"), name="other", redirect_uris=[REDIRECT])
    for which in ("access_token", "refresh_token"):
        answer = httpx.post(
            f"{servers[0].url}/oauth/oauth-a/revoke", data={"token": tokens[which], "client_id": other.client_id}
        )
        assert answer.status_code == 400  # not its token (invalid_grant)
    assert _grant_of(client_id).revoked_at is None
    assert [_mcp_status(server, tokens["access_token"]) for server in servers] == [200, 200]


# --- 1: rotation on a live pair --------------------------------------------------------------


def test_rotation_keeps_every_token_good_on_both_processes(servers, client_id, person):
    tokens = _tokens(person, servers, client_id)
    old_kid = extract_compact(tokens["access_token"].encode()).headers()["kid"]
    call_command("oauth_rotate_signing_key", "--tenant", "oauth-a", stdout=io.StringIO())
    newer = _refresh(servers[1], client_id, tokens["refresh_token"])
    assert newer.status_code == 200, newer.text
    new_kid = extract_compact(newer.json()["access_token"].encode()).headers()["kid"]
    assert new_kid != old_kid
    for server in servers:
        assert _mcp_status(server, tokens["access_token"]) == 200
        assert _mcp_status(server, newer.json()["access_token"]) == 200
    published = {key["kid"] for key in httpx.get(f"{servers[0].url}/oauth/oauth-a/jwks").json()["keys"]}
    assert {old_kid, new_kid} <= published


# --- 4: metadata documents, only from the signed-in step, within the limits -----------------


def test_the_token_endpoint_never_fetches_a_metadata_document(servers, oauth_world, orm):
    tenant = Tenant.objects.get(slug="oauth-a")
    before = OAuthClient.objects.filter(tenant=tenant).count()
    for index in range(5):
        path = f"/clients/drive-by-{index}.json"
        url = f"{oauth_world.documents.origin}{path}"
        oauth_world.documents.documents[path] = {
            "client_id": url,
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
        }
        answer = httpx.post(
            f"{servers[index % 2].url}/oauth/oauth-a/token",
            data={"grant_type": "authorization_code", "code": "x", "redirect_uri": REDIRECT, "client_id": url},
        )
        assert answer.status_code in (400, 401) and answer.json()["error"] == "invalid_client"
        assert path not in oauth_world.documents.server.hits
    assert OAuthClient.objects.filter(tenant=tenant).count() == before


def test_a_metadata_document_client_counts_as_a_registration(servers, oauth_world, person, orm):
    path = "/clients/over-the-limit.json"
    url = f"{oauth_world.documents.origin}{path}"
    oauth_world.documents.documents[path] = {
        "client_id": url,
        "client_name": "over the limit",
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
    }
    key = f"toolbay:oauth:registrations:oauth-a:127.0.0.1:{int(time.time() // 3600)}"
    redis = sync_redis()
    redis.delete(key)
    # Someone signed in who is no member of the tenant brings no client in.
    stranger = Person("mallory")
    try:
        with pytest.raises(AssertionError, match="HTTP 400"):
            _code(stranger, servers[0], url)
    finally:
        stranger.close()
    assert path not in oauth_world.documents.server.hits and redis.get(key) is None
    redis.set(key, 10_000, ex=3700)  # this address has used its registrations this hour
    try:
        with pytest.raises(AssertionError, match="HTTP 400"):
            _code(person, servers[0], url)
    finally:
        redis.delete(key)
    assert path not in oauth_world.documents.server.hits
    assert not OAuthClient.objects.filter(client_id=url).exists()
    # Within the limit, the signed-in step reads it (and counts it).
    assert _code(person, servers[0], url)
    assert path in oauth_world.documents.server.hits
    assert int(redis.get(key) or 0) == 1


# --- 7: forwarded headers --------------------------------------------------------------------


def test_forwarded_proto_from_an_untrusted_address_changes_nothing(servers):
    answer = httpx.get(
        f"{servers[0].url}/.well-known/oauth-authorization-server/oauth/oauth-a",
        headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"},
    )
    assert answer.status_code == 200
    assert answer.json()["issuer"] == f"{servers[0].url}/oauth/oauth-a"
