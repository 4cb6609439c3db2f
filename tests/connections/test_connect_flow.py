"""Each user's own account at a provider, end to end: the official SDK client calls an HTTP
tool that needs a connection; the server asks with a URL-mode elicitation (2025-11-25) or an
``input_required`` round (2026-07-28); the elicitation callback goes through the connect page
like a browser (Toolbay sign-in, the provider's sign-in and consent) and the call returns the
provider's ``sub`` for the token Toolbay sent, which is that user's own."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.utils import timezone
from mcp_types import CallToolResult, ElicitResult

from audit.journal import JOURNAL_KEY
from audit.models import AuditEvent, Invocation
from oauth.models import ConnectAttempt, Connection
from oauth.sealing import unseal
from tests.connections.browser import Browser
from tests.connections.conftest import CLIENT_ID, CLIENT_SECRET, PASSWORDS, PROVIDER, TENANT, ConnWorld
from tests.poll import wait_for

pytestmark = pytest.mark.live

MODES = ["legacy", "auto"]  # auto discovers 2026-07-28
# Every token the tests saw and every tool answer a client got, for the secrets scan at the end.
SEEN_SECRETS: set[str] = {CLIENT_SECRET}
ANSWERS: list[str] = []


def _following(browser: Browser, asked: list[Any], *, answer: str = "accept") -> Any:
    """An elicitation callback that opens the URL in ``browser`` and goes through the flow."""

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        if answer == "accept":
            await browser.go(params.url)
        return ElicitResult(action=answer)

    return elicit


async def _whoami(world: ConnWorld, person: str, mode: str, endpoint: str = "", **options: Any) -> CallToolResult:
    async with world.sdk_client(person, mode, endpoint, **options) as client:
        result = await client.call_tool("whoami", {})
    ANSWERS.append(result.model_dump_json())
    return result


def _sub(result: CallToolResult) -> str:
    assert result.is_error is False, result.content
    return str(json.loads(result.content[0].text)["sub"])


def _connection(person: str) -> Connection | None:
    connection = (
        Connection.objects.select_related("provider").filter(user__username=person, tenant__slug=TENANT).first()
    )
    if connection is not None:
        SEEN_SECRETS.add(unseal(connection.access_token_sealed))
        if connection.refresh_token_sealed:
            SEEN_SECRETS.add(unseal(connection.refresh_token_sealed))
    return connection


def _forget_connections() -> None:
    Connection.objects.filter(tenant__slug=TENANT).delete()


@pytest.mark.parametrize("mode", MODES)
def test_each_user_is_asked_once_and_gets_their_own_account(conn_world: ConnWorld, orm: None, mode: str) -> None:
    _forget_connections()

    async def scenario() -> None:
        for person in ("alice", "bob"):
            browser, asked = Browser(person, PASSWORDS[person]), []
            try:
                first = await _whoami(conn_world, person, mode, elicitation_callback=_following(browser, asked))
                assert len(asked) == 1 and asked[0].mode == "url"
                assert asked[0].url.startswith(f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/")
                assert "is connected" in browser.pages[-1].text
                assert _sub(first) == person
                # The provider's callback, replayed (same browser, same session): spent.
                replay = await browser.client.get(str(browser.pages[-1].url))
                assert replay.status_code == 400
                # Connected now: the next call asks nothing.
                again = await _whoami(conn_world, person, mode, elicitation_callback=_following(browser, asked))
                assert _sub(again) == person and len(asked) == 1
            finally:
                await browser.aclose()

    asyncio.run(scenario())
    alice, bob = _connection("alice"), _connection("bob")
    assert alice is not None and bob is not None
    assert (alice.account, bob.account) == ("alice", "bob")
    # Each call's row names the connection it acted with (and never a token).
    for connection in (alice, bob):
        rows = Invocation.objects.filter(
            tool_name="whoami", connection=f"{PROVIDER}#{connection.pk} {connection.account}"
        )
        wait_for(lambda rows=rows: rows.count() >= 2, message="the invocation rows of the connected calls")
    assert AuditEvent.objects.filter(object_type="oauth.Connection", changes__event=["", "connected"]).count() >= 2


def test_a_client_without_url_elicitation_gets_the_link_as_an_error_result(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
    result = asyncio.run(_whoami(conn_world, "alice", "legacy"))
    assert result.is_error is True
    text = result.content[0].text
    assert f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/" in text and "call the tool again" in text


def test_a_form_only_client_gets_error_32042_with_the_url(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
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
        answer = http.post(
            conn_world.endpoint,
            headers=session,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}},
        )
    body = answer.text
    ANSWERS.append(body)
    payload = json.loads(body[body.index("{") : body.rindex("}") + 1])
    assert payload["error"]["code"] == -32042
    (elicitation,) = payload["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["elicitationId"]
    assert elicitation["url"].startswith(f"{conn_world.server.url}/connect/{TENANT}/{PROVIDER}/start/")


def test_a_stolen_connect_link_connects_no_one(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
    asked: list[Any] = []

    async def scenario() -> None:
        declined = await _whoami(
            conn_world, "alice", "legacy", elicitation_callback=_following(None, asked, answer="decline")
        )  # type: ignore[arg-type]
        assert declined.is_error is True and "did not connect" in declined.content[0].text
        link = asked[0].url
        # Bob, signed in to Toolbay as himself, opens alice's link: refused.
        bob = Browser("bob", PASSWORDS["bob"])
        try:
            page = await bob.go(link)
            assert isinstance(page, httpx.Response) and page.status_code == 404
            assert "made for someone else" in page.text
        finally:
            await bob.aclose()
        # Alice starts it; the provider's consent page reaches bob, who completes it there as
        # himself: the callback lands in bob's browser session and is refused.
        alice = Browser("alice", PASSWORDS["alice"])
        bob = Browser("bob", PASSWORDS["bob"])
        try:
            to_provider = await alice.go(link, stop_at=conn_world.idp.issuer)
            assert isinstance(to_provider, str)
            await bob.go(f"{conn_world.server.url}/connect/")  # bob signs in to Toolbay
            page = await bob.go(to_provider)
            assert isinstance(page, httpx.Response) and page.status_code == 400
            # The link is spent for everyone now, alice included.
            again = await alice.go(link)
            assert isinstance(again, httpx.Response) and again.status_code == 404
        finally:
            await alice.aclose()
            await bob.aclose()

    asyncio.run(scenario())
    assert Connection.objects.filter(tenant__slug=TENANT).count() == 0
    # Started by alice (so no one can start it again), never completed.
    assert ConnectAttempt.objects.filter(pk=asked[0].elicitation_id, started_at__isnull=False, used_at=None).exists()


def _connect(world: ConnWorld, person: str) -> Connection:
    browser, asked = Browser(person, PASSWORDS[person]), []

    async def scenario() -> None:
        try:
            assert (
                _sub(await _whoami(world, person, "legacy", elicitation_callback=_following(browser, asked))) == person
            )
        finally:
            await browser.aclose()

    asyncio.run(scenario())
    connection = _connection(person)
    assert connection is not None
    return connection


def _introspect(world: ConnWorld, token: str) -> dict[str, Any]:
    answer = httpx.post(
        world.idp.url("/token/introspection"), data={"token": token}, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10
    )
    answer.raise_for_status()
    return dict(answer.json())


def test_an_expired_token_is_refreshed_without_asking(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
    connection = _connect(conn_world, "alice")
    old_access = unseal(connection.access_token_sealed)
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    asked: list[Any] = []
    result = asyncio.run(_whoami(conn_world, "alice", "auto", elicitation_callback=_following(None, asked)))  # type: ignore[arg-type]
    assert _sub(result) == "alice" and asked == []
    connection.refresh_from_db()
    assert connection.refreshed_at is not None and connection.expires_at > timezone.now()
    assert unseal(connection.access_token_sealed) != old_access


def test_concurrent_calls_on_two_servers_refresh_once(conn_world: ConnWorld, orm: None) -> None:
    """The provider rotates refresh tokens and ends the grant when a spent one is used again:
    if two processes refreshed at once, the user would lose the connection and be asked."""
    _forget_connections()
    connection = _connect(conn_world, "alice")
    Connection.objects.filter(pk=connection.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    asked: list[Any] = []

    async def scenario() -> list[CallToolResult]:
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    conn_world.sdk_client("alice", "legacy", endpoint, elicitation_callback=_following(None, asked))  # type: ignore[arg-type]
                )
                for endpoint in conn_world.endpoints() * 3
            ]
            # Every session is open first, so that the six calls arrive together.
            return await asyncio.gather(*(client.call_tool("whoami", {}) for client in clients))

    results = asyncio.run(scenario())
    assert [_sub(result) for result in results] == ["alice"] * 6
    assert asked == []
    connection.refresh_from_db()
    assert connection.refreshed_at is not None
    assert not AuditEvent.objects.filter(
        object_type="oauth.Connection", changes__event__1__startswith="refresh"
    ).exists()


def test_a_grant_revoked_at_the_provider_asks_again(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
    connection = _connect(conn_world, "bob")
    refresh = unseal(connection.refresh_token_sealed)
    access = unseal(connection.access_token_sealed)
    revoked = httpx.post(
        conn_world.idp.url("/token/revocation"), data={"token": refresh}, auth=(CLIENT_ID, CLIENT_SECRET), timeout=10
    )
    assert revoked.status_code == 200
    assert _introspect(conn_world, access)["active"] is False  # the grant's tokens ended with it
    browser, asked = Browser("bob", PASSWORDS["bob"]), []

    async def scenario() -> CallToolResult:
        try:
            return await _whoami(conn_world, "bob", "legacy", elicitation_callback=_following(browser, asked))
        finally:
            await browser.aclose()

    assert _sub(asyncio.run(scenario())) == "bob"
    assert len(asked) == 1  # asked again, and connected again
    assert AuditEvent.objects.filter(
        object_type="oauth.Connection", changes__event=["", "refresh failed (invalid_grant)"]
    ).exists()


def test_disconnect_on_the_self_service_page_revokes_at_the_provider(conn_world: ConnWorld, orm: None) -> None:
    _forget_connections()
    connection = _connect(conn_world, "alice")
    access, refresh = unseal(connection.access_token_sealed), unseal(connection.refresh_token_sealed)
    assert _introspect(conn_world, access)["active"] is True
    browser = Browser("alice", PASSWORDS["alice"])

    async def scenario() -> None:
        try:
            page = await browser.go(f"{conn_world.server.url}/connect/")  # signs in, lists, and the form…
            # …is the disconnect button of her one connection: the browser pressed it.
            assert isinstance(page, httpx.Response) and "None." in page.text
        finally:
            await browser.aclose()

    asyncio.run(scenario())
    assert _connection("alice") is None
    assert _introspect(conn_world, access)["active"] is False
    assert _introspect(conn_world, refresh)["active"] is False
    assert AuditEvent.objects.filter(object_type="oauth.Connection", changes__event=["", "disconnected"]).exists()


def test_no_secret_in_logs_audit_rows_answers_or_pages(conn_world: ConnWorld, orm: None) -> None:
    """Runs last: every token the module's flows produced, and the client secret, appear in
    no server or provider log, no audit row, no journaled invocation, no tool answer, no page."""
    for person in ("alice", "bob"):
        _connection(person)  # the tokens of the connections that remain
    _connect(conn_world, "alice") if _connection("alice") is None else None
    assert len(SEEN_SECRETS) > 5
    browser = Browser("alice", PASSWORDS["alice"])

    async def page() -> str:
        try:
            response = await browser.client.get(f"{conn_world.server.url}/connect/")
            login = await browser.go(f"{conn_world.server.url}/oauth/login/?next=/oauth/authorizations/")
            assert isinstance(login, httpx.Response)
            listing = await browser.client.get(f"{conn_world.server.url}/connect/")
            return response.text + listing.text
        finally:
            await browser.aclose()

    SEEN_SECRETS.update(conn_world.seen_secrets)  # what the other modules' flows produced
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
        "answers": "\n".join([*ANSWERS, *conn_world.answers]),
        "page": asyncio.run(page()),
    }
    assert "Test IdP" in texts["page"] and "alice" in texts["audit"]
    for where, text in texts.items():
        leaked = [secret[:6] + "…" for secret in SEEN_SECRETS if secret in text]
        assert leaked == [], f"secrets in {where}: {leaked}"
