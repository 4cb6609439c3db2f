"""The official MCP Python SDK's OAuth client provider against a live server, headless: a bare
401 leads it to the tenant's metadata and the embedded authorization server; it registers
(dynamically, or by a client ID metadata document), the test signs in and consents over
HTTP, and the client lists and calls tools, refreshes its token and steps up its scope."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.auth.oauth2 import OAuthClientProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from oauth.models import Grant, OAuthClient, RefreshToken
from tests.oauth.people import Person

pytestmark = pytest.mark.live

REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the person hands the code over


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """What the SDK's redirect and callback handlers talk to: a person approving in a thread."""

    def __init__(self, person: Person) -> None:
        self.person = person
        self.urls: list[str] = []
        self.result: dict[str, str] = {}

    async def redirect(self, url: str) -> None:
        self.urls.append(url)
        self.result = await asyncio.to_thread(self.person.approve, url)

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=self.result["code"], state=self.result.get("state"), iss=self.result["iss"])


def _provider(endpoint: str, browser: Browser, storage: MemoryStorage, **kwargs: Any) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(
        client_name="SDK test client",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        endpoint, metadata, storage, redirect_handler=browser.redirect, callback_handler=browser.callback, **kwargs
    )


def test_bare_401_names_the_metadata_and_the_scope(oauth_server, oauth_world):
    response = httpx.post(
        oauth_server.endpoint("oauth-a"),
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{oauth_server.url}/.well-known/oauth-protected-resource/mcp/oauth-a", '
        'scope="tools:list"'
    )
    prm = httpx.get(f"{oauth_server.url}/.well-known/oauth-protected-resource/mcp/oauth-a").json()
    assert prm == {
        "resource": f"{oauth_server.url}/mcp/oauth-a",
        "authorization_servers": [f"{oauth_server.url}/oauth/oauth-a"],
        "scopes_supported": ["tools:list", "tools:call"],
        "bearer_methods_supported": ["header"],
        "resource_name": "OAuth Alpha",
    }
    metadata = httpx.get(f"{oauth_server.url}/.well-known/oauth-authorization-server/oauth/oauth-a").json()
    assert metadata["issuer"] == f"{oauth_server.url}/oauth/oauth-a"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["client_id_metadata_document_supported"] is True
    # A tenant without OAuth advertises nothing (no metadata, a plain challenge).
    assert httpx.get(f"{oauth_server.url}/.well-known/oauth-protected-resource/mcp/oauth-plain").status_code == 404
    plain = httpx.post(oauth_server.endpoint("oauth-plain"), json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert plain.status_code == 401 and plain.headers["www-authenticate"] == "Bearer"


def test_dynamic_registration_code_flow_list_call_step_up_and_refresh(oauth_server, oauth_world, orm):
    person = Person("olivia")
    browser = Browser(person)
    storage = MemoryStorage()
    endpoint = oauth_server.endpoint("oauth-a")

    async def scenario() -> None:
        provider = _provider(endpoint, browser, storage)
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        async with Client(streamable_http_client(endpoint, http_client=http), mode="legacy") as client:
            # The 401 asked for tools:list only: the first consent grants that.
            assert storage.tokens is not None and storage.tokens.scope == "tools:list"
            listed = await client.list_tools()
            assert {"echo", "add"} <= {tool.name for tool in listed.tools}
            # tools/call needs tools:call: 403 insufficient_scope, the SDK steps up (a second consent).
            echoed = await client.call_tool("echo", {"text": "stepped up"})
            assert echoed.content[0].text == "stepped up"
            assert set(storage.tokens.scope.split()) == {"tools:list", "tools:call"}
            assert person.consents_seen == 2
            session_id = client.session.session_id if hasattr(client.session, "session_id") else None
            # Refresh: the token is due; the SDK refreshes it (rotation) and keeps its session.
            old_access, old_refresh = storage.tokens.access_token, storage.tokens.refresh_token
            provider.context.token_expiry_time = time.time() - 1
            summed = await client.call_tool("add", {"a": 2, "b": 3})
            assert summed.structured_content == {"sum": 5}
            assert storage.tokens.access_token != old_access
            assert storage.tokens.refresh_token not in (None, old_refresh)
            if session_id is not None:
                assert client.session.session_id == session_id
        await http.aclose()

    try:
        asyncio.run(scenario())
    finally:
        person.close()
    # Authorization request: PKCE S256, the resource indicator, the issuer in the response.
    first = httpx.URL(browser.urls[0])
    assert first.params["code_challenge_method"] == "S256"
    assert first.params["resource"] == endpoint
    client = OAuthClient.objects.get(tenant__slug="oauth-a", client_id=storage.client.client_id)
    assert client.kind == OAuthClient.Kind.REGISTERED and client.client_name == "SDK test client"
    grant = Grant.objects.get(client=client, revoked_at__isnull=True)
    assert grant.user.username == "olivia"
    assert set(grant.scope.split()) == {"tools:list", "tools:call"}
    # Rotation: the first refresh token was used once and is spent.
    assert RefreshToken.objects.filter(grant=grant, revoked_at__isnull=False).exists()


def test_client_id_metadata_document(oauth_server, oauth_world, orm):
    client_url = f"{oauth_world.documents.origin}/clients/sdk.json"
    oauth_world.documents.documents["/clients/sdk.json"] = {
        "client_id": client_url,
        "client_name": "CIMD test client",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    person = Person("olivia")
    browser = Browser(person)
    storage = MemoryStorage()
    endpoint = oauth_server.endpoint("oauth-a")

    async def scenario() -> None:
        provider = _provider(endpoint, browser, storage, client_metadata_url=client_url)
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        async with Client(streamable_http_client(endpoint, http_client=http), mode="legacy") as client:
            listed = await client.list_tools()
            assert "echo" in {tool.name for tool in listed.tools}
        await http.aclose()

    try:
        asyncio.run(scenario())
    finally:
        person.close()
    assert storage.client is not None and storage.client.client_id == client_url
    assert "/clients/sdk.json" in oauth_world.documents.server.hits
    row = OAuthClient.objects.get(tenant__slug="oauth-a", client_id=client_url)
    assert row.kind == OAuthClient.Kind.METADATA_DOCUMENT and row.client_name == "CIMD test client"
    assert "CIMD test client" in person.last_consent_page and "OAuth Alpha" in person.last_consent_page


def test_a_non_member_cannot_authorize(oauth_server, oauth_world):
    person = Person("mallory")
    registered = httpx.post(
        f"{oauth_server.url}/oauth/oauth-a/register",
        json={"client_name": "x", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    url = httpx.URL(
        f"{oauth_server.url}/oauth/oauth-a/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "code_challenge_method": "S256",
            "state": "s",
        },
    )
    try:
        with pytest.raises(AssertionError, match="HTTP 403"):
            person.approve(str(url))
    finally:
        person.close()
