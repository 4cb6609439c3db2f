"""What holds for API keys holds for OAuth principals: access rules name subjects and groups,
list_changed reaches exactly the sessions whose list changed, sessions are bound to the
subject (not the token), a revoked consent ends its sessions, rate limits apply, and the
invocation log records the subject and client."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from audit.models import Invocation
from oauth.models import Grant, OAuthClient
from oauth.server.authorization import grant_revoke
from oauth.services import oauth_settings_set, trusted_issuer_save
from oauth.signing import signing_key
from tenants.models import Tenant
from tenants.services import tenant_create
from tests.mcp.watcher import Watcher
from tests.mcp.wire import McpSession, rpc
from tests.oauth.people import OAuthWorld
from tests.poll import wait_for
from tools_app.catalog.models import AccessRule, Tool

pytestmark = pytest.mark.live


def _tenant(slug: str, world: OAuthWorld, **fields: Any) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        tenant = tenant_create(slug=slug, name=slug, **fields)
        oauth_settings_set(tenant=tenant, changes={"enabled": True, "embedded_server": False})
        trusted_issuer_save(tenant=tenant, fields={"issuer": world.issuer.url})
    return tenant


def _private_tool(tenant: Tenant, name: str) -> Tool:
    tool = Tool(
        tenant=tenant,
        name=name,
        description=f"{name} tool",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        backend_config={"handler": "demo.echo"},
        confirmation="none",  # a test tool: it changes nothing
    )
    tool.full_clean()
    tool.save()
    return tool


def _rule(tenant: Tenant, tool: Tool, **narrowing: Any) -> AccessRule:
    rule = AccessRule(tenant=tenant, owner=tenant, tool=tool, **narrowing)
    rule.full_clean()
    rule.save()
    return rule


def _names(session: McpSession) -> set[str]:
    return {tool["name"] for tool in session.request("tools/list")["result"]["tools"]}


def test_rules_on_subjects_and_groups_and_list_changed_per_subject(orm, http, oauth_server, oauth_world):
    tenant = _tenant("oauth-rules", oauth_world)
    endpoint = oauth_server.endpoint("oauth-rules")
    for_alice = _private_tool(tenant, "alice_only")
    for_engineers = _private_tool(tenant, "engineers_only")
    _rule(tenant, for_alice, oauth_subjects=["ext-alice"])
    _rule(tenant, for_engineers, oauth_groups=["engineering"])
    mint = oauth_world.issuer.mint
    alice = McpSession.open(http, endpoint, mint(audience=endpoint, subject="ext-alice"))
    bob = McpSession.open(http, endpoint, mint(audience=endpoint, subject="ext-bob"))
    carol = McpSession.open(http, endpoint, mint(audience=endpoint, subject="ext-carol", groups=["engineering"]))
    assert _names(alice) == {"alice_only"}
    assert _names(bob) == set()
    assert _names(carol) == {"engineers_only"}

    watchers = {name: Watcher(session) for name, session in (("alice", alice), ("bob", bob), ("carol", carol))}
    try:
        for_alice.description = "changed for alice"
        for_alice.save()
        watchers["alice"].wait_changes(1)
        # A change everyone sees, after it: carol and bob then hold exactly that one.
        _rule(tenant, _private_tool(tenant, "everyone"))
        for name in ("alice", "bob", "carol"):
            watchers[name].wait_changes(2 if name == "alice" else 1)
        assert watchers["bob"].changes() == 1 and watchers["carol"].changes() == 1
    finally:
        for watcher in watchers.values():
            watcher.stop()


def test_sessions_follow_the_subject_not_the_token(orm, http, oauth_server, oauth_world):
    _tenant("oauth-rules", oauth_world)
    endpoint = oauth_server.endpoint("oauth-rules")
    mint = oauth_world.issuer.mint
    session = McpSession.open(http, endpoint, mint(audience=endpoint, subject="ext-dana"))
    # A new token of the same subject (as after a refresh) keeps the session...
    session.key = mint(audience=endpoint, subject="ext-dana", jti="second")
    assert session.request("ping")["result"] == {}
    # ...another subject's token is refused on it, as a missing session is.
    session.key = mint(audience=endpoint, subject="ext-eve")
    assert session.post(rpc("ping", id=99)).status_code == 404


def _embedded_token(server_url: str, slug: str, grant: Grant, **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "iss": f"{server_url}/oauth/{slug}",
        "aud": f"{server_url}/mcp/{slug}",
        "sub": grant.user.username,
        "client_id": grant.client.client_id,
        "scope": "tools:list tools:call",
        "gid": grant.id,
        "iat": now,
        "exp": now + 300,
        **claims,
    }
    key = signing_key(grant.tenant)
    return jwt.encode({"alg": "ES256", "kid": key.kid, "typ": "at+jwt"}, payload, KeySet([key]))


def test_revoking_a_consent_ends_its_sessions_and_tokens(orm, http, oauth_server, oauth_world):
    tenant = Tenant.objects.get(slug="oauth-a")
    client = OAuthClient.objects.create(
        tenant=tenant, client_id="tbc_revocation_test", kind=OAuthClient.Kind.PREREGISTERED, redirect_uris=[]
    )
    from django.contrib.auth import get_user_model

    grant = Grant.objects.create(
        tenant=tenant, user=get_user_model().objects.get(username="olivia"), client=client, scope="tools:list"
    )
    endpoint = oauth_server.endpoint("oauth-a")
    token = _embedded_token(oauth_server.url, "oauth-a", grant)
    session = McpSession.open(http, endpoint, token)
    watcher = Watcher(session)
    grant_revoke(grant=grant)
    assert watcher.closed.wait(10), "the revoked consent's stream must close"
    refused = httpx.post(endpoint, json=rpc("ping"), headers=session.headers())
    assert refused.status_code == 401
    assert "revoked" in refused.headers["www-authenticate"]
    # An embedded token is good only on its own tenant: oauth-c refuses it (issuer, audience).
    other = httpx.post(
        oauth_server.endpoint("oauth-c"),
        json=rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}),
        headers={"Authorization": f"Bearer {_embedded_token(oauth_server.url, 'oauth-a', grant)}"},
    )
    assert other.status_code == 401


def test_rate_limits_apply_to_oauth_callers(orm, http, oauth_server, oauth_world):
    tenant = _tenant("oauth-limited", oauth_world, calls_per_minute=2)
    _rule(tenant, _private_tool(tenant, "limited_echo"))
    endpoint = oauth_server.endpoint("oauth-limited")
    session = McpSession.open(http, endpoint, oauth_world.issuer.mint(audience=endpoint, subject="ext-frank"))
    answers = [session.request("tools/call", {"name": "limited_echo", "arguments": {"text": "x"}}) for _ in range(3)]
    assert all("result" in answer for answer in answers[:2])
    assert "error" in answers[2] and "limit" in answers[2]["error"]["message"].lower()


def test_invocation_log_records_subject_and_client(orm, http, oauth_server, oauth_world):
    tenant = _tenant("oauth-audited", oauth_world)
    _rule(tenant, _private_tool(tenant, "audited_echo"))
    endpoint = oauth_server.endpoint("oauth-audited")
    session = McpSession.open(http, endpoint, oauth_world.issuer.mint(audience=endpoint, subject="ext-grace"))
    assert "result" in session.request("tools/call", {"name": "audited_echo", "arguments": {"text": "x"}})
    httpx.post(endpoint, json=rpc("ping"), headers={"Authorization": "Bearer not-a-token"})

    row = wait_for(
        lambda: Invocation.objects.filter(tenant=tenant, tool_name="audited_echo").first(),
        timeout=15,
        message="the call's row",
    )
    assert (row.oauth_subject, row.oauth_client, row.key_id) == ("ext-grace", "ext-client", None)
    assert row.key_label == "oauth ext-grace via ext-client"
    refused = wait_for(
        lambda: Invocation.objects.filter(tenant=tenant, outcome=Invocation.Outcome.DENIED).first(),
        timeout=15,
        message="the refusal's row",
    )
    assert "Invalid access token" in refused.error_message
