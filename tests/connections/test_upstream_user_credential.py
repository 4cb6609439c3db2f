"""An upstream MCP server that acts for each user: a real MCP server built with the official SDK,
an OAuth resource server in front of which the test IdP stands (it introspects every token at
the IdP), proxied by Toolbay with a ``user_credential``.

- ``up-conn`` sends each caller's own connection token: the official SDK client calls through
  Toolbay as alice and as bob (two server processes), and the upstream sees each one's ``sub``,
  on a session of their own.
- ``up-obo`` sends a token obtained by RFC 8693 token exchange at the IdP for the caller's own
  token (the tenant's users sign in to Toolbay at that IdP): the upstream sees the user, with
  its own audience, and never the token the user gave Toolbay.
- Listing the upstream's tools (``add_upstream``, refresh) runs without a user, with the
  server's service credential: a token the IdP issued to Toolbay as a client.

Also here: a connection-backed call run on a Celery worker, ``notifications/elicitation/complete``
reaching the session that asked on another process, and the secrets scan of these paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult

from api.services import access_token_create
from audit.journal import JOURNAL_KEY
from audit.models import AuditEvent, Invocation
from oauth.models import ConnectAttempt, Connection, TrustedIssuer
from oauth.sealing import unseal
from oauth.services import oauth_settings_set, trusted_issuer_save
from tenants.models import Membership, Tenant
from tenants.services import membership_set
from tests.connections.browser import Browser
from tests.connections.conftest import (
    BROKER_PREFIX,
    CLIENT_ID,
    CLIENT_SECRET,
    EXCHANGE_AUDIENCE,
    PASSWORDS,
    PROVIDER,
    TENANT,
    TOOLBAY_AUDIENCE,
    UPSTREAM_CLIENT_ID,
    UPSTREAM_CLIENT_SECRET,
    ConnWorld,
)
from tests.connections.idp_upstream import IdpUpstream
from tests.mcp.live import kill_workers, start_worker
from tests.poll import wait_for, wait_for_async
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import secret_set
from tools_app.catalog.models import Tool
from tools_app.catalog.services import catalog_entry_create

pytestmark = pytest.mark.live

MODES = ["legacy", "auto"]  # auto discovers 2026-07-28
SECRETS: set[str] = {CLIENT_SECRET, UPSTREAM_CLIENT_SECRET}
ANSWERS: list[str] = []  # every answer a client got here, for the secrets scan


def _token(world: ConnWorld, **form: str) -> dict[str, Any]:
    answer = httpx.post(world.idp.url("/token"), data=form, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10)
    assert answer.status_code == 200, answer.text
    issued = dict(answer.json())
    SECRETS.add(issued["access_token"])
    return issued


def _add_upstream(name: str, url: str, prefix: str, credential: dict[str, Any]) -> str:
    output = io.StringIO()
    call_command(
        "add_upstream",
        name,
        "--tenant",
        TENANT,
        "--url",
        url,
        "--bearer-secret",
        "upstream-service",
        "--user-credential",
        json.dumps(credential),
        "--prefix",
        prefix,
        "--publish-all",
        "--grant",
        stdout=output,
        stderr=io.StringIO(),
    )
    return output.getvalue()


@pytest.fixture(scope="module")
def upstream(conn_world: ConnWorld, django_db_blocker: Any) -> Iterator[IdpUpstream]:
    server = IdpUpstream(conn_world.idp.issuer, (UPSTREAM_CLIENT_ID, UPSTREAM_CLIENT_SECRET), EXCHANGE_AUDIENCE).start()
    # The service credential: a token the IdP issued to Toolbay itself (client credentials).
    service_token = _token(conn_world, grant_type="client_credentials")["access_token"]
    with django_db_blocker.unblock(), override_settings(TOOLBAY_OUTBOUND_ALLOWED_HOSTS=["127.0.0.1"]):
        tenant = Tenant.objects.get(slug=TENANT)
        secret_set(tenant=tenant, name="upstream-service", value=service_token)
        listed = {
            "conn": _add_upstream("up-conn", server.url, "conn.", {"type": "connection", "provider": PROVIDER}),
            "obo": _add_upstream(
                "up-obo",
                server.url,
                "obo.",
                {"type": "token_exchange", "provider": PROVIDER, "audience": EXCHANGE_AUDIENCE},
            ),
        }
    assert listed == {"conn": "published conn.whoami  whoami\n", "obo": "published obo.whoami  whoami\n"}
    try:
        yield server
    finally:
        server.stop()
        with django_db_blocker.unblock():
            Tool.objects.filter(tenant__slug=TENANT, backend_kind="upstream_mcp").delete()
            UpstreamServer.objects.filter(tenant__slug=TENANT).delete()


@contextlib.asynccontextmanager
async def _client(endpoint: str, bearer: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30) as http,
        Client(streamable_http_client(endpoint, http_client=http), mode=mode, **options) as client,
    ):
        yield client


async def _call(endpoint: str, bearer: str, mode: str, tool: str, **options: Any) -> CallToolResult:
    async with _client(endpoint, bearer, mode, **options) as client:
        result = await client.call_tool(tool, {})
    ANSWERS.append(result.model_dump_json())
    return result


def _following(browser: Browser | None, asked: list[Any]) -> Any:
    """An elicitation callback that follows the URL in ``browser`` like a person would."""

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        if browser is not None:
            await browser.go(params.url)
        return ElicitResult(action="accept")

    return elicit


def _seen(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error is False, result.content
    return dict(json.loads(result.content[0].text))


def _remember_connection_tokens() -> None:
    for connection in Connection.objects.filter(tenant__slug=TENANT):
        SECRETS.add(unseal(connection.access_token_sealed))
        if connection.refresh_token_sealed:
            SECRETS.add(unseal(connection.refresh_token_sealed))


def test_listing_the_upstream_uses_the_service_credential(upstream: IdpUpstream) -> None:
    # add_upstream listed (and published) the tools as Toolbay's own client, no user involved.
    assert upstream.seen.principals, "the upstream verified no token"
    assert {answer.get("client_id") for answer in upstream.seen.principals} == {CLIENT_ID}
    assert all("sub" not in answer for answer in upstream.seen.principals)


@pytest.mark.parametrize("mode", MODES)
def test_each_user_reaches_the_upstream_as_themselves(
    conn_world: ConnWorld, upstream: IdpUpstream, orm: None, mode: str
) -> None:
    Connection.objects.filter(tenant__slug=TENANT).delete()
    servers = conn_world.endpoints()

    async def scenario() -> None:
        for person, (here, there) in (("alice", servers), ("bob", servers[::-1])):
            browser, asked = Browser(person, PASSWORDS[person]), []
            key = conn_world.keys[person]
            try:
                first = await _call(here, key, mode, "conn.whoami", elicitation_callback=_following(browser, asked))
                assert len(asked) == 1 and asked[0].mode == "url"
                assert "is connected" in browser.pages[-1].text
                assert _seen(first)["sub"] == person
                again = await _call(there, key, mode, "conn.whoami", elicitation_callback=_following(browser, asked))
                assert _seen(again)["sub"] == person and len(asked) == 1
            finally:
                await browser.aclose()
        # Both connected: calls of the two users at once, on both processes, each their own.
        pairs = [(person, endpoint) for person in ("alice", "bob") for endpoint in servers] * 2
        results = await asyncio.gather(
            *(_call(endpoint, conn_world.keys[person], mode, "conn.whoami") for person, endpoint in pairs)
        )
        assert [_seen(result)["sub"] for result in results] == [person for person, _ in pairs]

    asyncio.run(scenario())
    _remember_connection_tokens()
    # Every upstream session served one principal only, and none was refused for another's
    # credential (the SDK answers 404 to a session used with someone else's token).
    assert upstream.seen.sessions and all(len(whom) == 1 for whom in upstream.seen.sessions.values())
    assert {"alice", "bob"} <= set().union(*upstream.seen.sessions.values())
    assert 404 not in upstream.seen.statuses
    for connection in Connection.objects.filter(tenant__slug=TENANT):
        rows = Invocation.objects.filter(
            tool_name="conn.whoami", connection=f"{PROVIDER}#{connection.pk} {connection.account}"
        )
        wait_for(lambda rows=rows: rows.count() >= 4, message="the invocation rows naming the connection")


def test_a_missing_connection_asks_as_for_an_http_tool(conn_world: ConnWorld, upstream: IdpUpstream, orm: None) -> None:
    Connection.objects.filter(tenant__slug=TENANT, user__username="alice").delete()
    # A client that cannot follow a link: an isError result with the link and what to do.
    plain = asyncio.run(_call(conn_world.endpoint, conn_world.keys["alice"], "legacy", "conn.whoami"))
    assert plain.is_error is True
    assert f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/" in plain.content[0].text
    assert "call the tool again" in plain.content[0].text
    # A 2025-11-25 client that elicits by form only: -32042 with the URL-mode elicitation.
    headers = {
        "Authorization": f"Bearer {conn_world.keys['alice']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    with httpx.Client(timeout=15, headers=headers) as http:
        init = http.post(
            conn_world.endpoint,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "form-only", "version": "1"},
                },
            },
        )
        session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        http.post(conn_world.endpoint, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        body = http.post(
            conn_world.endpoint,
            headers=session,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "conn.whoami", "arguments": {}},
            },
        ).text
    ANSWERS.append(body)
    payload = json.loads(body[body.index("{") : body.rindex("}") + 1])
    assert payload["error"]["code"] == -32042
    (elicitation,) = payload["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["elicitationId"]
    assert elicitation["url"].startswith(f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/")


def test_the_session_that_asked_learns_on_another_process_that_the_link_was_followed(
    conn_world: ConnWorld, upstream: IdpUpstream, orm: None
) -> None:
    """notifications/elicitation/complete (2025-11-25): the session lives on the second process;
    the connect link, and so the provider's callback that stores the connection, is the first's."""
    Connection.objects.filter(tenant__slug=TENANT, user__username="alice").delete()
    notices: list[Any] = []

    async def on_message(message: Any) -> None:
        if getattr(message, "method", "") == "notifications/elicitation/complete":
            notices.append(message.params.elicitation_id)

    async def scenario() -> str:
        browser, asked = Browser("alice", PASSWORDS["alice"]), []
        try:
            async with _client(
                conn_world.other_server.endpoint(TENANT),
                conn_world.keys["alice"],
                "legacy",
                elicitation_callback=_following(browser, asked),
                message_handler=on_message,
            ) as client:
                result = await client.call_tool("conn.whoami", {})
                ANSWERS.append(result.model_dump_json())
                assert _seen(result)["sub"] == "alice"
                assert asked[0].url.startswith(conn_world.server.url)  # the callback lands on the first
                await wait_for_async(lambda: notices, message="notifications/elicitation/complete")
                return str(asked[0].elicitation_id)
        finally:
            await browser.aclose()

    elicitation_id = asyncio.run(scenario())
    assert notices == [elicitation_id]
    assert ConnectAttempt.objects.get(pk=elicitation_id).used_at is not None

    # 2026-07-28 has no such notification (the client retries): its attempt names no session.
    Connection.objects.filter(tenant__slug=TENANT, user__username="alice").delete()
    browser, asked = Browser("alice", PASSWORDS["alice"]), []

    async def modern() -> None:
        try:
            result = await _call(
                conn_world.endpoint,
                conn_world.keys["alice"],
                "auto",
                "conn.whoami",
                elicitation_callback=_following(browser, asked),
            )
            assert _seen(result)["sub"] == "alice"
        finally:
            await browser.aclose()

    asyncio.run(modern())
    assert ConnectAttempt.objects.get(pk=asked[0].elicitation_id).mcp_session_id == ""
    _remember_connection_tokens()


def test_a_grant_revoked_at_the_idp_asks_again_through_the_upstream(
    conn_world: ConnWorld, upstream: IdpUpstream, orm: None
) -> None:
    """The upstream answers 401 to a token of a revoked grant: Toolbay tries a refresh, which the
    IdP refuses, forgets the connection (audited) and asks bob to connect again; the call goes on."""
    connection = Connection.objects.filter(tenant__slug=TENANT, user__username="bob").first()
    if connection is None or not connection.refresh_token_sealed:
        pytest.skip("bob has no connection with a refresh token to revoke")
    refresh = unseal(connection.refresh_token_sealed)
    revoked = httpx.post(
        conn_world.idp.url("/token/revocation"), data={"token": refresh}, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10
    )
    assert revoked.status_code == 200
    refused_before = upstream.seen.statuses.count(401)
    browser, asked = Browser("bob", PASSWORDS["bob"]), []

    async def scenario() -> CallToolResult:
        try:
            return await _call(
                conn_world.endpoint,
                conn_world.keys["bob"],
                "legacy",
                "conn.whoami",
                elicitation_callback=_following(browser, asked),
            )
        finally:
            await browser.aclose()

    assert _seen(asyncio.run(scenario()))["sub"] == "bob"
    assert len(asked) == 1  # asked again, and connected again
    assert upstream.seen.statuses.count(401) > refused_before  # the upstream refused the old token
    assert AuditEvent.objects.filter(
        object_type="oauth.Connection", changes__event=["", "refresh failed (invalid_grant)"]
    ).exists()
    _remember_connection_tokens()


@pytest.fixture(scope="module")
def signed_in_at_the_idp(
    conn_world: ConnWorld, upstream: IdpUpstream, django_db_blocker: Any
) -> Iterator[dict[str, str]]:
    """The tenant's users sign in to Toolbay at the IdP: it trusts the IdP's tokens (checked by
    introspection) whose audience is the tenant's. Each user's token for Toolbay is issued by
    the IdP for the session they began there (through their connection's sign-in, here)."""
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=TENANT)
        oauth_settings_set(
            tenant=tenant, changes={"enabled": True, "embedded_server": False, "list_scope": "", "call_scope": ""}
        )
        trusted_issuer_save(
            tenant=tenant,
            fields={
                "issuer": conn_world.idp.issuer,
                "validation": TrustedIssuer.Validation.INTROSPECTION,
                "client_id": CLIENT_ID,
                "audience": TOOLBAY_AUDIENCE,
                "advertise": False,
            },
            client_secret=CLIENT_SECRET,
        )
        tokens = {}
        for person in ("alice", "bob"):
            connection = Connection.objects.filter(tenant=tenant, user__username=person).first()
            if connection is None:
                asked: list[Any] = []
                browser = Browser(person, PASSWORDS[person])

                async def connect(browser: Browser = browser, asked: list[Any] = asked, person: str = person) -> None:
                    try:
                        await _call(
                            conn_world.endpoint,
                            conn_world.keys[person],
                            "legacy",
                            "conn.whoami",
                            elicitation_callback=_following(browser, asked),
                        )
                    finally:
                        await browser.aclose()

                asyncio.run(connect())
                connection = Connection.objects.get(tenant=tenant, user__username=person)
            idp_session_token = unseal(connection.access_token_sealed)
            tokens[person] = _token(
                conn_world,
                grant_type="urn:ietf:params:oauth:grant-type:token-exchange",
                subject_token=idp_session_token,
                subject_token_type="urn:ietf:params:oauth:token-type:access_token",
                audience=TOOLBAY_AUDIENCE,
            )["access_token"]
        _remember_connection_tokens()
    try:
        yield tokens
    finally:
        with django_db_blocker.unblock():
            TrustedIssuer.objects.filter(tenant__slug=TENANT).delete()
            oauth_settings_set(tenant=Tenant.objects.get(slug=TENANT), changes={"enabled": False})


@pytest.mark.parametrize("mode", MODES)
def test_token_exchange_with_the_idp_in_front_of_the_upstream(
    conn_world: ConnWorld, upstream: IdpUpstream, signed_in_at_the_idp: dict[str, str], orm: None, mode: str
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        seen = []
        for person, endpoint in zip(("alice", "bob"), conn_world.endpoints(), strict=True):
            result = await _call(endpoint, signed_in_at_the_idp[person], mode, "obo.whoami")
            seen.append(_seen(result))
        return seen

    # The tenant's OAuth settings reach the servers' caches after the commit.
    alice, bob = wait_for(
        lambda: asyncio.run(scenario()), ignore=(httpx2.HTTPStatusError,), message="the exchanged calls"
    )
    assert (alice["sub"], bob["sub"]) == ("alice", "bob")
    assert alice["aud"] in (EXCHANGE_AUDIENCE, [EXCHANGE_AUDIENCE])
    assert alice["client_id"] == CLIENT_ID  # exchanged by Toolbay's client, for the user
    # The token the user gave Toolbay never went to the upstream; the exchanged ones did.
    assert not set(signed_in_at_the_idp.values()) & set(upstream.seen.tokens)
    SECRETS.update(upstream.seen.tokens)
    rows = Invocation.objects.filter(
        tool_name="obo.whoami", oauth_subject="alice", connection=f"{PROVIDER} exchange for {EXCHANGE_AUDIENCE}"
    )
    wait_for(lambda: rows.exists(), message="the invocation row naming the exchange")


def test_the_users_toolbay_token_sent_straight_to_the_upstream_is_refused(
    upstream: IdpUpstream, signed_in_at_the_idp: dict[str, str]
) -> None:
    """What the exchange is for: the token a user gave Toolbay is not meant for the upstream."""
    refused = httpx.post(
        upstream.url,
        headers={"Authorization": f"Bearer {signed_in_at_the_idp['alice']}", "Accept": "application/json"},
        json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
        timeout=10,
    )
    assert refused.status_code == 401


def test_an_api_key_caller_has_no_token_to_exchange(conn_world: ConnWorld, upstream: IdpUpstream) -> None:
    result = asyncio.run(_call(conn_world.endpoint, conn_world.keys["alice"], "legacy", "obo.whoami"))
    assert result.is_error is True
    assert "own OAuth token" in result.content[0].text


@pytest.fixture(scope="module")
def worker(conn_world: ConnWorld, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any) -> Iterator[None]:
    env = {
        "TOOLBAY_PUBLIC_URL": conn_world.server.url,
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
        "CELERY_BROKER_KEY_PREFIX": BROKER_PREFIX,
    }
    process = start_worker(tmp_path_factory.mktemp("conn-worker"), "conn-worker", "toolbay.short,toolbay.long", env)
    conn_world.log_paths.append(process.log_path)
    with django_db_blocker.unblock():
        catalog_entry_create(
            model=Tool,
            tenant=Tenant.objects.get(slug=TENANT),
            fields={
                "name": "whoami_later",
                "description": "Who the provider says the bearer is, asked from a worker.",
                "input_schema": {"type": "object", "properties": {}},
                "backend_kind": "http",
                "backend_config": {
                    "method": "GET",
                    "url": f"{conn_world.idp.issuer}/me",
                    "auth": {"type": "connection", "provider": PROVIDER},
                },
                "execution_mode": Tool.ExecutionMode.BACKGROUND,
                "read_only_hint": True,
                "tags": ["conn"],
            },
        )
    try:
        yield
    finally:
        kill_workers([process])
        with django_db_blocker.unblock():
            Tool.objects.filter(tenant__slug=TENANT, name="whoami_later").delete()


def test_a_background_call_acts_with_and_records_the_callers_connection(
    conn_world: ConnWorld, worker: None, orm: None
) -> None:
    Connection.objects.filter(tenant__slug=TENANT, user__username="bob").delete()
    browser, asked = Browser("bob", PASSWORDS["bob"]), []

    async def scenario() -> tuple[CallToolResult, CallToolResult]:
        try:
            first = await _call(
                conn_world.endpoint,
                conn_world.keys["bob"],
                "legacy",
                "whoami_later",
                elicitation_callback=_following(browser, asked),
            )
            again = await _call(
                conn_world.other_server.endpoint(TENANT), conn_world.keys["bob"], "legacy", "whoami_later"
            )
            return first, again
        finally:
            await browser.aclose()

    first, again = asyncio.run(scenario())
    # The worker asked (URL-mode elicitation relayed to the client), then acted as bob.
    assert len(asked) == 1 and asked[0].mode == "url"
    assert json.loads(first.content[0].text)["sub"] == "bob" == json.loads(again.content[0].text)["sub"]
    connection = Connection.objects.get(tenant__slug=TENANT, user__username="bob")
    rows = Invocation.objects.filter(
        tool_name="whoami_later", run_id__gt="", connection=f"{PROVIDER}#{connection.pk} bob"
    )
    wait_for(lambda: rows.count() >= 2, message="the background runs' rows naming bob's connection")
    _remember_connection_tokens()


def test_no_secret_in_logs_audit_rows_api_answers_or_errors(
    conn_world: ConnWorld, upstream: IdpUpstream, orm: None
) -> None:
    """Runs last: every token these paths produced (service token, connection tokens, the users'
    Toolbay tokens, the exchanged tokens the upstream got) and both client secrets appear in no
    process log, audit row, journaled or stored invocation, tool answer, error, or API answer."""
    _remember_connection_tokens()
    SECRETS.update(upstream.seen.tokens)
    assert len(SECRETS) > 8
    admin = get_user_model().objects.create_user("conn-admin", password=None)
    try:
        membership_set(tenant=Tenant.objects.get(slug=TENANT), user=admin, role=Membership.Role.ADMIN)
        _, raw = access_token_create(user=admin, name="scan")
        api = {
            path: httpx.get(
                f"{conn_world.server.url}/api/v1/{path}/", headers={"Authorization": f"Bearer {raw}"}, timeout=15
            )
            for path in ("invocations", "connections", "audit-events", "tools", "connection-providers")
        }
    finally:
        admin.delete()
    assert all(answer.status_code == 200 for answer in api.values()), {p: a.status_code for p, a in api.items()}
    upstream_errors = [row.last_error for row in UpstreamServer.objects.filter(tenant__slug=TENANT)] + list(
        Invocation.objects.filter(tenant__slug=TENANT).values_list("error_message", flat=True)
    )
    texts = {
        "logs": conn_world.texts(),
        "audit": json.dumps(list(AuditEvent.objects.filter(tenant__slug=TENANT).values()), default=str),
        "invocations": json.dumps(list(Invocation.objects.filter(tenant__slug=TENANT).values()), default=str),
        "journal": json.dumps(
            [
                {key.decode(): value.decode(errors="replace") for key, value in fields.items()}
                for _, fields in redis.Redis.from_url(settings.REDIS_URL).xrange(JOURNAL_KEY)
            ]
        ),
        "answers": "\n".join(ANSWERS),
        "api": "\n".join(answer.text for answer in api.values()),
        "errors": "\n".join(upstream_errors),
    }
    assert "conn.whoami" in texts["api"] and "up-conn" in texts["audit"]
    for where, text in texts.items():
        leaked = [secret[:6] + "…" for secret in SECRETS if secret in text]
        assert leaked == [], f"secrets in {where}: {leaked}"
