"""Tokens of an external issuer (its own key pair, served as a JWKS by a local server):
accepted on the tenant that trusts it, refused everywhere else, and every kind of bad token
refused with a 401 that says why (``error="invalid_token"``)."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest

from tests.mcp.wire import ACCEPT_BOTH, INIT_PARAMS, McpSession, rpc
from tests.oauth.people import OAuthWorld

pytestmark = pytest.mark.live


def _initialize(endpoint: str, token: str) -> httpx.Response:
    return httpx.post(
        endpoint,
        json=rpc("initialize", INIT_PARAMS, id=0),
        headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _challenge_params(response: httpx.Response) -> dict[str, str]:
    header = response.headers["www-authenticate"]
    assert header.startswith("Bearer ")
    params = {}
    for part in header[len("Bearer ") :].split('", '):
        name, _, value = part.partition("=")
        params[name] = value.strip('"')
    return params


def test_accepted_on_the_tenant_that_trusts_the_issuer(oauth_server, oauth_world: OAuthWorld):
    endpoint = oauth_server.endpoint("oauth-b")
    token = oauth_world.issuer.mint(audience=endpoint, subject="ext-alice", groups=["engineering"])
    with httpx.Client(timeout=30) as http:
        session = McpSession.open(http, endpoint, token)
        listed = session.request("tools/list")["result"]["tools"]
        assert "echo" in {tool["name"] for tool in listed}
        called = session.request("tools/call", {"name": "echo", "arguments": {"text": "from outside"}})
        assert called["result"]["content"][0]["text"] == "from outside"
    # The tenant's metadata sends clients to that issuer.
    prm = httpx.get(f"{oauth_server.url}/.well-known/oauth-protected-resource/mcp/oauth-b").json()
    assert prm["authorization_servers"] == [oauth_world.issuer.url]
    assert prm["resource"] == endpoint


def test_refused_on_tenants_that_do_not_trust_it(oauth_server, oauth_world: OAuthWorld):
    for slug in ("oauth-a", "oauth-c", "oauth-plain"):
        endpoint = oauth_server.endpoint(slug)
        token = oauth_world.issuer.mint(audience=endpoint)  # even with the right audience
        response = _initialize(endpoint, token)
        assert response.status_code == 401, (slug, response.text)
    refused = _initialize(oauth_server.endpoint("oauth-a"), oauth_world.issuer.mint(audience="x"))
    params = _challenge_params(refused)
    assert params["error"] == "invalid_token"
    assert "not trusted" in params["error_description"]


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("expired", "expired"),
        ("wrong_audience", "audience"),
        ("token_for_another_tenant", "audience"),
        ("wrong_issuer", "not trusted"),
        ("alg_none", "algorithm"),
        ("tampered", "signature"),
        ("foreign_key", "signing key"),
        ("garbage", "not a token"),
    ],
)
def test_bad_tokens_get_401_invalid_token(oauth_server, oauth_world: OAuthWorld, case: str, why: str):
    endpoint = oauth_server.endpoint("oauth-b")
    issuer = oauth_world.issuer
    good = issuer.mint(audience=endpoint)
    header, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    if case == "expired":
        token = issuer.mint(audience=endpoint, expires_in=-120)
    elif case == "wrong_audience":
        token = issuer.mint(audience="https://elsewhere.example/mcp")
    elif case == "token_for_another_tenant":
        token = issuer.mint(audience=oauth_server.endpoint("oauth-a"))
    elif case == "wrong_issuer":
        token = issuer.mint(audience=endpoint, issuer="https://impostor.example/realms/test")
    elif case == "alg_none":
        token = f"{_b64({'alg': 'none', 'typ': 'at+jwt'})}.{payload}."
    elif case == "tampered":
        token = f"{header}.{_b64({**claims, 'sub': 'someone-else'})}.{signature}"
    elif case == "foreign_key":
        from tests.oauth.servers import ExternalIssuer

        other = ExternalIssuer()  # same claims, same kid shape, another key
        try:
            token = other.mint(audience=endpoint, issuer=issuer.url)
        finally:
            other.stop()
    else:
        token = "definitely-not-a-jwt"
    response = _initialize(endpoint, token)
    assert response.status_code == 401, response.text
    params = _challenge_params(response)
    assert params["error"] == "invalid_token"
    assert why in params["error_description"], params
    assert params["resource_metadata"] == f"{oauth_server.url}/.well-known/oauth-protected-resource/mcp/oauth-b"
    assert response.json()["error"]["message"].startswith("Invalid access token")


def test_api_keys_turned_off(oauth_server, oauth_world: OAuthWorld):
    response = _initialize(oauth_server.endpoint("oauth-b"), oauth_world.keys["b"])
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "API keys are turned off for this tenant"
    # Beside OAuth, oauth-a still takes its keys.
    with httpx.Client(timeout=30) as http:
        session = McpSession.open(http, oauth_server.endpoint("oauth-a"), oauth_world.keys["a"])
        assert session.request("ping")["result"] == {}


def test_scopes_gate_methods_with_403_insufficient_scope(oauth_server, oauth_world: OAuthWorld):
    endpoint = oauth_server.endpoint("oauth-b")
    token = oauth_world.issuer.mint(audience=endpoint, scope="tools:list")
    with httpx.Client(timeout=30) as http:
        session = McpSession.open(http, endpoint, token)
        assert session.request("tools/list")["result"]["tools"]
        session.next_id += 1
        response = session.post(rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=session.next_id))
    assert response.status_code == 403
    assert response.headers["www-authenticate"].startswith(
        'Bearer error="insufficient_scope", scope="tools:call tools:list"'
    )
    params = _challenge_params(response)
    assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp/oauth-b")


def test_scopes_gate_2026_07_28_requests_too(oauth_server, oauth_world: OAuthWorld):
    endpoint = oauth_server.endpoint("oauth-b")
    token = oauth_world.issuer.mint(audience=endpoint, scope="tools:list")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def post(method: str, params: dict, **headers: str) -> httpx.Response:
        with httpx.Client(timeout=30) as http:
            return http.post(
                endpoint,
                json=rpc(method, {**params, "_meta": meta}),
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2026-07-28",
                    "Mcp-Method": method,
                    **headers,
                },
            )

    assert post("tools/list", {}).json()["result"]["tools"]
    refused = post("tools/call", {"name": "echo", "arguments": {"text": "x"}}, **{"Mcp-Name": "echo"})
    assert refused.status_code == 403
    assert _challenge_params(refused)["error"] == "insufficient_scope"


def test_opaque_tokens_by_introspection(orm, oauth_server, oauth_world: OAuthWorld):
    from oauth.services import oauth_settings_set, trusted_issuer_save
    from tenants.models import Tenant
    from tenants.services import tenant_create
    from tools_app.catalog.services import access_rule_grant_pattern

    if not Tenant.objects.filter(slug="oauth-intro").exists():
        tenant = tenant_create(slug="oauth-intro", name="Introspected")
        access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        oauth_settings_set(tenant=tenant, changes={"enabled": True, "embedded_server": False})
        trusted_issuer_save(
            tenant=tenant,
            fields={"issuer": oauth_world.issuer.url, "validation": "introspection", "client_id": "toolbay-rs"},
            client_secret="rs-secret",
        )
    endpoint = oauth_server.endpoint("oauth-intro")
    now = int(time.time())
    answer = {"active": True, "sub": "ext-ivy", "aud": endpoint, "exp": now + 300, "scope": "tools:list tools:call"}
    oauth_world.issuer.opaque["opaque-good"] = {**answer, "iss": oauth_world.issuer.url, "client_id": "ext-client"}
    oauth_world.issuer.opaque["opaque-elsewhere"] = {**answer, "aud": oauth_server.endpoint("oauth-b")}
    oauth_world.issuer.opaque["opaque-expired"] = {**answer, "exp": now - 120}
    with httpx.Client(timeout=30) as http:
        session = McpSession.open(http, endpoint, "opaque-good")
        assert "echo" in {tool["name"] for tool in session.request("tools/list")["result"]["tools"]}
    for token, why in (
        ("opaque-unknown", "not active"),
        ("opaque-elsewhere", "audience"),
        ("opaque-expired", "expired"),
    ):
        response = _initialize(endpoint, token)
        assert response.status_code == 401, token
        assert _challenge_params(response)["error"] == "invalid_token"
        assert why in response.json()["error"]["message"]
    assert "/realms/test/introspect" in oauth_world.issuer.server.hits
