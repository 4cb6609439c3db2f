"""OAuth from an OpenAPI description, end to end: ``import_openapi`` reads a hand-written
document of an API on loopback whose schemes are OAuth2 client credentials, authorization code,
OpenID Connect, and an authorization code at a provider nobody registered; the official SDK
client calls the tools on the two live servers of ``conn_world``; the API checks every bearer
token by introspection at the real provider (oidc-provider) and answers whose it is.

The module's name sorts it before test_connect_flow, whose last test scans every log, audit
row, journal entry and answer for the tokens seen here (``conn_world.seen_secrets``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from mcp_types import CallToolResult, ElicitResult

from oauth.models import Connection, ConnectionProvider
from oauth.sealing import unseal
from tenants.models import Tenant
from tests.connections.browser import Browser
from tests.connections.conftest import (
    API_SCOPE,
    CLIENT_ID,
    CLIENT_SECRET,
    LATER_PROVIDER,
    MACHINE_CLIENT_ID,
    MACHINE_CLIENT_SECRET,
    PASSWORDS,
    PROVIDER,
    TENANT,
    ConnWorld,
)
from tests.mcp.live import free_port
from tests.poll import wait_for
from tools_app.backends.vault import secret_set
from tools_app.catalog.models import Tool

pytestmark = pytest.mark.live

MODES = ["legacy", "auto"]
CACHE_KEYS = "toolbay:client-credentials:*"


@dataclass
class Api:
    """The API the document describes: every ``.../whoami`` introspects the bearer at the
    provider and answers 401 for a token that is not active, else whose token it is."""

    url: str
    bearers: list[str] = field(default_factory=list)
    refused: int = 0


def _serve_api(issuer: str) -> tuple[Api, ThreadingHTTPServer]:
    port = free_port()
    api = Api(f"http://127.0.0.1:{port}")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            scheme, _, token = self.headers.get("Authorization", "").partition(" ")
            answer: dict[str, Any] = {"error": "invalid_token"}
            status = 401
            if scheme == "Bearer" and token and self.path.endswith("/whoami"):
                with lock:
                    api.bearers.append(token)
                found = httpx.post(
                    f"{issuer}/token/introspection", data={"token": token}, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10
                ).json()
                if found.get("active"):
                    status = 200
                    answer = {key: found.get(key) for key in ("sub", "client_id", "scope")}
            if status == 401:
                with lock:
                    api.refused += 1
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: a request line carries no token, but nothing needs it

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return api, server


def _document(api_url: str, issuer: str) -> dict[str, Any]:
    def operation(operation_id: str, security: list[dict[str, list[str]]]) -> dict[str, Any]:
        return {"operationId": operation_id, "security": security, "responses": {"200": {"description": "whose"}}}

    return {
        "openapi": "3.0.3",
        "info": {"title": "CRM", "version": "1"},
        "servers": [{"url": api_url}],
        "components": {
            "securitySchemes": {
                "machine": {
                    "type": "oauth2",
                    "flows": {"clientCredentials": {"tokenUrl": f"{issuer}/token", "scopes": {API_SCOPE: "read"}}},
                },
                "user": {
                    "type": "oauth2",
                    "flows": {
                        "authorizationCode": {
                            "authorizationUrl": f"{issuer}/auth",
                            "tokenUrl": f"{issuer}/token",
                            "scopes": {"profile": "name"},
                        }
                    },
                },
                "oidc": {"type": "openIdConnect", "openIdConnectUrl": f"{issuer}/.well-known/openid-configuration"},
                "elsewhere": {
                    "type": "oauth2",
                    "flows": {
                        "authorizationCode": {
                            "authorizationUrl": "https://login.elsewhere.example/authorize",
                            "tokenUrl": "https://login.elsewhere.example/token",
                            "scopes": {},
                        }
                    },
                },
            }
        },
        "paths": {
            "/machine/whoami": {"get": operation("machineWhoami", [{"machine": [API_SCOPE]}])},
            "/user/whoami": {"get": operation("userWhoami", [{"user": []}])},
            "/oidc/whoami": {"get": operation("oidcWhoami", [{"oidc": ["profile"]}])},
            "/elsewhere/whoami": {"get": operation("elsewhereWhoami", [{"elsewhere": []}])},
        },
    }


@dataclass
class Imported:
    api: Api
    notes: str
    issuer: str


def _grants(world: ConnWorld, grant_type: str) -> int:
    return int(httpx.get(world.idp.url("/_test/grants"), timeout=5).json().get(grant_type, 0))


@pytest.fixture(scope="module")
def imported(
    conn_world: ConnWorld, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Imported]:
    api, server = _serve_api(conn_world.idp.issuer)
    path = tmp_path_factory.mktemp("openapi") / "crm.json"
    path.write_text(json.dumps(_document(api.url, conn_world.idp.issuer)))
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=TENANT)
        secret_set(tenant=tenant, name="crm-machine", value=MACHINE_CLIENT_SECRET)
        out, err = io.StringIO(), io.StringIO()
        call_command(
            "import_openapi", str(path), "--tenant", TENANT, "--name", "crm", "--client-id", MACHINE_CLIENT_ID,
            "--grant", stdout=out, stderr=err,
        )  # fmt: skip
        assert len(out.getvalue().splitlines()) == 4, err.getvalue()
    try:
        yield Imported(api, err.getvalue(), conn_world.idp.issuer)
    finally:
        server.shutdown()
        conn_world.seen_secrets.update(api.bearers)
        with django_db_blocker.unblock():
            for connection in Connection.objects.filter(tenant__slug=TENANT):
                conn_world.seen_secrets.add(unseal(connection.access_token_sealed))
                if connection.refresh_token_sealed:
                    conn_world.seen_secrets.add(unseal(connection.refresh_token_sealed))
            Connection.objects.filter(tenant__slug=TENANT).delete()  # the next modules start unconnected
            ConnectionProvider.objects.filter(tenant__slug=TENANT, name=LATER_PROVIDER).delete()


async def _call(
    world: ConnWorld, tool: str, person: str = "alice", mode: str = "legacy", **options: Any
) -> CallToolResult:
    async with world.sdk_client(person, mode, **options) as client:
        result = await client.call_tool(tool, {})
    world.answers.append(result.model_dump_json())
    return result


def _whose(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error is False, result.content
    return dict(json.loads(result.content[0].text))


def _forget_cached_tokens() -> None:
    store = redis.Redis.from_url(settings.REDIS_URL)
    for key in store.scan_iter(CACHE_KEYS):
        store.delete(key)


def _cached_keys() -> list[bytes]:
    return list(redis.Redis.from_url(settings.REDIS_URL).scan_iter(CACHE_KEYS))


def _following(browser: Browser | None, asked: list[Any]) -> Any:
    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        if browser is not None:
            await browser.go(params.url)
        return ElicitResult(action="accept" if browser is not None else "decline")

    return elicit


def test_the_import_says_what_each_scheme_became(imported: Imported, orm: None) -> None:
    notes = imported.notes
    assert f"'machine': OAuth2 client credentials: tokens from {imported.issuer}/token" in notes
    assert f"'user': OAuth2 (authorizationCode): each user's own account at connection provider '{PROVIDER}'" in notes
    assert f"'oidc': OpenID Connect: each user's own account at connection provider '{PROVIDER}'" in notes
    assert f"provider '{LATER_PROVIDER}' and answer an error until it exists" in notes
    assert f"add_provider {LATER_PROVIDER} --tenant {TENANT} --authorization-endpoint" in notes
    machine = Tool.objects.get(tenant__slug=TENANT, name="machineWhoami").backend_config["auth"]
    assert machine["type"] == "oauth2_client_credentials" and machine["scopes"] == [API_SCOPE]
    assert MACHINE_CLIENT_SECRET not in json.dumps(machine)  # the settings name the vault secret only


@pytest.mark.parametrize("mode", MODES)
def test_client_credentials_call_the_api_with_the_providers_token(
    conn_world: ConnWorld, imported: Imported, orm: None, mode: str
) -> None:
    _forget_cached_tokens()
    before = _grants(conn_world, "client_credentials")
    first = _whose(asyncio.run(_call(conn_world, "machineWhoami", mode=mode)))
    assert first["client_id"] == MACHINE_CLIENT_ID and first["scope"] == API_SCOPE
    # Cached (sealed) in Redis until shortly before it expires (the provider gives 600 s).
    (key,) = _cached_keys()
    ttl = redis.Redis.from_url(settings.REDIS_URL).ttl(key)
    assert 500 < ttl <= 570
    sealed = redis.Redis.from_url(settings.REDIS_URL).get(key)
    assert sealed is not None and imported.api.bearers[-1].encode() not in sealed
    # The other process uses the same token: one token request for both calls.
    second = asyncio.run(
        _call(conn_world, "machineWhoami", mode=mode, endpoint=conn_world.other_server.endpoint(TENANT))
    )
    assert _whose(second)["client_id"] == MACHINE_CLIENT_ID
    assert _grants(conn_world, "client_credentials") - before == 1
    assert imported.api.bearers[-1] == imported.api.bearers[-2]


def test_concurrent_calls_on_two_servers_fetch_one_token(conn_world: ConnWorld, imported: Imported, orm: None) -> None:
    _forget_cached_tokens()
    before = _grants(conn_world, "client_credentials")
    seen = len(imported.api.bearers)

    async def scenario() -> list[CallToolResult]:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(conn_world.sdk_client("alice", "legacy", endpoint))
                for endpoint in conn_world.endpoints() * 4
            ]
            # Every session is open first, so that the eight calls arrive together.
            return await asyncio.gather(*(client.call_tool("machineWhoami", {}) for client in clients))

    results = asyncio.run(scenario())
    conn_world.answers.extend(result.model_dump_json() for result in results)
    assert [_whose(result)["client_id"] for result in results] == [MACHINE_CLIENT_ID] * 8
    assert _grants(conn_world, "client_credentials") - before == 1
    assert len(set(imported.api.bearers[seen:])) == 1


def test_a_revoked_token_is_dropped_and_a_new_one_fetched(conn_world: ConnWorld, imported: Imported, orm: None) -> None:
    _forget_cached_tokens()
    _whose(asyncio.run(_call(conn_world, "machineWhoami")))
    token = imported.api.bearers[-1]
    revoked = httpx.post(
        conn_world.idp.url("/token/revocation"),
        data={"token": token},
        auth=(MACHINE_CLIENT_ID, MACHINE_CLIENT_SECRET),
        timeout=10,
    )
    assert revoked.status_code == 200
    before, refused = _grants(conn_world, "client_credentials"), imported.api.refused
    # On the other process: the API answers 401, the token is dropped, a new one fetched, sent once more.
    result = asyncio.run(_call(conn_world, "machineWhoami", endpoint=conn_world.other_server.endpoint(TENANT)))
    assert _whose(result)["client_id"] == MACHINE_CLIENT_ID
    assert imported.api.refused == refused + 1
    assert _grants(conn_world, "client_credentials") == before + 1
    assert imported.api.bearers[-2] == token and imported.api.bearers[-1] != token
    # The new one is what both processes use now.
    asyncio.run(_call(conn_world, "machineWhoami"))
    assert (
        imported.api.bearers[-1] == imported.api.bearers[-2] and _grants(conn_world, "client_credentials") == before + 1
    )


def test_an_expired_token_is_fetched_again(conn_world: ConnWorld, imported: Imported, orm: None) -> None:
    _forget_cached_tokens()
    asyncio.run(_call(conn_world, "machineWhoami"))
    first = imported.api.bearers[-1]
    (key,) = _cached_keys()
    store = redis.Redis.from_url(settings.REDIS_URL)
    store.pexpire(key, 1)  # the margin before the provider's expiry has come
    wait_for(lambda: not store.exists(key), message="the cached token to lapse")
    before = _grants(conn_world, "client_credentials")
    _whose(asyncio.run(_call(conn_world, "machineWhoami")))
    assert imported.api.bearers[-1] != first and _grants(conn_world, "client_credentials") == before + 1


@pytest.mark.parametrize("tool", ["userWhoami", "oidcWhoami"])
def test_a_user_flow_asks_for_the_connection_then_acts_as_that_user(
    conn_world: ConnWorld, imported: Imported, orm: None, tool: str
) -> None:
    Connection.objects.filter(tenant__slug=TENANT).delete()
    # A client that cannot follow a link gets it as an error result; the API is not called.
    calls = len(imported.api.bearers)
    pending = asyncio.run(_call(conn_world, tool, "bob"))
    assert pending.is_error is True
    assert f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/" in pending.content[0].text
    assert len(imported.api.bearers) == calls

    async def scenario(person: str) -> tuple[list[Any], CallToolResult, CallToolResult]:
        browser, asked = Browser(person, PASSWORDS[person]), []
        try:
            first = await _call(conn_world, tool, person, "auto", elicitation_callback=_following(browser, asked))
            again = await _call(conn_world, tool, person, "legacy", elicitation_callback=_following(None, asked))
        finally:
            await browser.aclose()
        return asked, first, again

    for person in ("alice", "bob"):
        asked, first, again = asyncio.run(scenario(person))
        assert len(asked) == 1 and asked[0].mode == "url"
        assert _whose(first)["sub"] == person and _whose(again)["sub"] == person
        assert _whose(first)["client_id"] == CLIENT_ID  # the connection's token, issued to Toolbay


def test_an_unregistered_provider_answers_what_to_register_until_it_exists(
    conn_world: ConnWorld, imported: Imported, orm: None
) -> None:
    calls = len(imported.api.bearers)
    result = asyncio.run(_call(conn_world, "elsewhereWhoami"))
    assert result.is_error is True and len(imported.api.bearers) == calls  # never sent without a token
    text = result.content[0].text
    assert f"connection provider '{LATER_PROVIDER}', which is not registered yet" in text
    assert f"add_provider {LATER_PROVIDER} --tenant {TENANT} --authorization-endpoint " in text
    # The admin registers it (at this provider, under the name the tools expect); no re-import.
    call_command(
        "add_provider", LATER_PROVIDER, "--tenant", TENANT, "--issuer", conn_world.idp.issuer, "--client-id", CLIENT_ID,
        "--client-secret-env", "CONN_TEST_CLIENT_SECRET", "--scope", "openid", "--base-url", conn_world.server.url,
        "--no-check", stdout=io.StringIO(),
    )  # fmt: skip

    async def scenario() -> tuple[list[Any], CallToolResult]:
        browser, asked = Browser("alice", PASSWORDS["alice"]), []
        try:
            return asked, await _call(conn_world, "elsewhereWhoami", elicitation_callback=_following(browser, asked))
        finally:
            await browser.aclose()

    asked, connected = asyncio.run(scenario())
    assert asked[0].url.startswith(f"{conn_world.server.url}/connect/{TENANT}/{LATER_PROVIDER}/start/")
    assert _whose(connected)["sub"] == "alice"
