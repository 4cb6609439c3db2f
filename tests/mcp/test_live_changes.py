"""notifications/tools/list_changed: from any change, through every process, to exactly the
sessions whose visible tools changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client as DjangoClient
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tenants.models import Membership
from tenants.services import api_key_create, api_key_revoke, membership_set, tenant_create
from tests.mcp.watcher import LIST_CHANGED, Watcher
from tests.mcp.wire import McpSession, rpc
from tests.poll import holds_for, wait_for, wait_for_async
from tests.tools_app.admin_forms import tool_data
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import access_rule_create, catalog_entry_create

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def _close_watchers() -> Iterator[None]:
    """Streams end with their test: a stream left open would hold its server up at shutdown."""
    yield
    watchers, Watcher.opened_by_test[:] = list(Watcher.opened_by_test), []
    for watcher in watchers:
        watcher.close()
    for watcher in watchers:
        assert watcher.closed.wait(5)


@pytest.fixture(scope="module")
def gamma(live_world, django_db_blocker) -> dict[str, Any]:
    """A tenant of its own: keys with and without the "team" scope, and two private tools,
    one of them visible only to "team" keys."""
    with django_db_blocker.unblock():
        tenant = tenant_create(slug="live-gamma", name="Live Gamma")
        keys = {}
        for name, scopes in (("team", ["team"]), ("plain", []), ("doomed", [])):
            _, keys[name] = api_key_create(tenant=tenant, name=f"gamma {name}", scopes=scopes)
        for name in ("gamma_open", "gamma_team"):
            fields = {
                "name": name,
                "description": "v1",
                "input_schema": {"type": "object"},
                "backend_config": {"handler": "demo.echo"},
                "tags": [name],
                "confirmation": "none",  # a test tool: it changes nothing
            }
            catalog_entry_create(model=Tool, tenant=tenant, fields=fields)
        access_rule_create(fields={"tenant": tenant, "tool_pattern": "tag:gamma_open"})
        access_rule_create(fields={"tenant": tenant, "tool_pattern": "tag:gamma_team", "scopes": ["team"]})
        superuser = get_user_model().objects.create_superuser("gamma-root", password="pw")
        operator = get_user_model().objects.create_user("gamma-operator", password="pw", is_staff=True)
        membership_set(tenant=tenant, user=operator, role=Membership.Role.OPERATOR)
        stranger = get_user_model().objects.create_user("beta-operator", password="pw", is_staff=True)
        beta = tenant.__class__.objects.get(slug="live-beta")
        membership_set(tenant=beta, user=stranger, role=Membership.Role.OPERATOR)
    return {"tenant": tenant, "keys": keys, "superuser": superuser, "operator": operator, "stranger": stranger}


def _session(http: httpx.Client, server: Any, slug: str, key: str) -> McpSession:
    return McpSession.open(http, server.endpoint(slug), key)


def _all_tools(session: McpSession) -> dict[str, dict[str, Any]]:
    """tools/list, every page (the live servers page by 3), by name."""
    tools: dict[str, dict[str, Any]] = {}
    cursor = None
    while True:
        page = session.request("tools/list", {"cursor": cursor} if cursor else {})["result"]
        tools.update((tool["name"], tool) for tool in page["tools"])
        if not (cursor := page.get("nextCursor")):
            return tools


def _edit(name: str, description: str) -> None:
    tool = Tool.objects.get(name=name, tenant__slug="live-gamma")
    tool.description = description
    tool.save()


def _edit_in_thread(name: str, description: str) -> None:
    try:
        _edit(name, description)
    finally:
        connection.close()  # a thread's connection would keep the test database from being dropped


def test_admin_edit_reaches_sessions_on_both_processes_and_no_other_tenant(
    orm, http, server, other_server, live_world, gamma
):
    on_a = Watcher(_session(http, server, "live-gamma", gamma["keys"]["team"]))
    on_b = Watcher(_session(http, other_server, "live-gamma", gamma["keys"]["plain"]))
    other_tenant = Watcher(_session(http, server, "live-beta", live_world.keys["beta"]))
    tool = Tool.objects.get(name="gamma_open")
    admin = DjangoClient()
    admin.force_login(gamma["superuser"])
    data = tool_data(
        tenant=str(tool.tenant_id),
        name="gamma_open",
        description="edited in the admin",
        input_schema='{"type": "object"}',
        tags='["gamma_open"]',
        read_only_hint="unknown",
    )
    response = admin.post(f"/admin/tools_app/tool/{tool.pk}/change/", data)
    assert response.status_code == 302, response.content[:2000]
    on_a.wait_changes(1)
    on_b.wait_changes(1)

    def counts() -> tuple[int, int, int]:
        return on_a.changes(), on_b.changes(), other_tenant.changes()

    holds_for(
        lambda: counts() == (1, 1, 0),
        duration=0.5,
        message=lambda: f"one list_changed on each gamma session, none elsewhere (got {counts()})",
    )
    for session in (on_a.session, on_b.session):
        for endpoint in (server.endpoint("live-gamma"), other_server.endpoint("live-gamma")):
            session.endpoint = endpoint
            tools = session.request("tools/list")["result"]["tools"]
            assert {t["name"]: t["description"] for t in tools}["gamma_open"] == "edited in the admin"


def test_orm_change_from_another_process(orm, http, server, gamma):
    watcher = Watcher(_session(http, server, "live-gamma", gamma["keys"]["plain"]))
    _edit("gamma_open", "edited through the ORM")  # this test process is not the server
    watcher.wait_changes(1)


def test_sessions_whose_view_did_not_change_hear_nothing(orm, http, server, gamma):
    team = Watcher(_session(http, server, "live-gamma", gamma["keys"]["team"]))
    plain = Watcher(_session(http, server, "live-gamma", gamma["keys"]["plain"]))
    _edit("gamma_team", "only team keys see this")
    team.wait_changes(1)
    holds_for(lambda: plain.changes() == 0, duration=0.7, message="no list_changed for the unchanged view")


def test_rolled_back_change_sends_nothing(orm, http, server, gamma):
    watcher = Watcher(_session(http, server, "live-gamma", gamma["keys"]["plain"]))
    with pytest.raises(RuntimeError), transaction.atomic():
        _edit("gamma_open", "never committed")
        raise RuntimeError("roll back")
    holds_for(lambda: watcher.changes() == 0, duration=1.0, message="no list_changed for a rolled-back change")


def test_bulk_change_of_200_tools_is_one_notification_per_session(orm, http, server, other_server, gamma):
    watchers = [Watcher(_session(http, s, "live-gamma", gamma["keys"]["plain"])) for s in (server, other_server)]
    with transaction.atomic():
        for i in range(200):
            tool = Tool(
                tenant=gamma["tenant"],
                name=f"gamma_bulk_{i:03}",
                description="bulk",
                input_schema={"type": "object"},
                backend_config={"handler": "demo.echo"},
                tags=["gamma_open"],
            )
            tool.save()
    for watcher in watchers:
        watcher.wait_changes(1)
    holds_for(
        lambda: [w.changes() for w in watchers] == [1, 1],
        duration=1.0,
        message=lambda: f"one list_changed per session for 200 changes (got {[w.changes() for w in watchers]})",
    )
    listed = _all_tools(watchers[0].session)
    assert sum(1 for name in listed if name.startswith("gamma_bulk_")) == 200
    Tool.objects.filter(name__startswith="gamma_bulk_").delete()


def test_revoked_key_closes_its_session(orm, http, server, gamma):
    session = _session(http, server, "live-gamma", gamma["keys"]["doomed"])
    watcher = Watcher(session)
    api_key_revoke(key=gamma["tenant"].api_keys.get(name="gamma doomed"))
    assert watcher.closed.wait(10), "the revoked key's stream must close"
    assert session.post(rpc("ping")).status_code == 401


def test_a_key_revoked_under_many_sessions_on_two_processes_ends_them_all_and_no_other_keys(
    orm, http, server, other_server, gamma
):
    """The fan-out checks each credential once per process and shares the answer among its
    sessions: every session of the revoked key ends, on both processes, and a session of
    another key of the same tenant, checked in the same round, stays."""
    tenant = gamma["tenant"]
    doomed_row, doomed = api_key_create(tenant=tenant, name="gamma shared doomed")
    _, kept = api_key_create(tenant=tenant, name="gamma shared kept")
    doomed_watchers = [Watcher(_session(http, s, "live-gamma", doomed)) for s in (server, other_server) * 2]
    kept_watchers = [Watcher(_session(http, s, "live-gamma", kept)) for s in (server, other_server)]
    api_key_revoke(key=doomed_row)
    for watcher in doomed_watchers:
        assert watcher.closed.wait(10), "every session of the revoked key must end"
        assert watcher.session.post(rpc("ping")).status_code == 401
    holds_for(lambda: not any(w.closed.is_set() for w in kept_watchers), duration=1.0, message="other keys' streams")
    for watcher in kept_watchers:
        assert watcher.session.post(rpc("ping")).status_code == 200
        watcher.stop()


def test_deactivating_a_tenant_closes_its_sessions(orm, http, server, other_server):
    tenant = tenant_create(slug="live-closing", name="Closing")
    AccessRule.objects.create(tenant=tenant, tool_pattern="tag:demo")
    _, key = api_key_create(tenant=tenant, name="closing")
    watchers = [Watcher(_session(http, s, "live-closing", key)) for s in (server, other_server)]
    tenant.is_active = False
    tenant.save()
    for watcher in watchers:
        assert watcher.closed.wait(10), "sessions of a deactivated tenant end"
    assert watchers[0].session.post(rpc("ping")).status_code == 404


def test_change_while_disconnected_is_announced_on_reconnect(orm, http, server, other_server, gamma):
    session = _session(http, server, "live-gamma", gamma["keys"]["plain"])
    first = Watcher(session)
    last_seen = wait_for(lambda: first.events, message="the stream's priming event")[-1].id
    first.stop()
    lock = names.standalone_lock_key(session.session_id)
    wait_for(lambda: not sync_redis().exists(lock), message="the server to notice the client left")
    offline = "changed while the client was offline"
    _edit("gamma_open", offline)
    # The process the client comes back to knows of the change before it does.
    observer = _session(http, other_server, "live-gamma", gamma["keys"]["plain"])
    wait_for(
        lambda: _all_tools(observer)["gamma_open"]["description"] == offline,
        message="the other process to list the changed tool",
    )
    session.endpoint = other_server.endpoint("live-gamma")
    resumed = Watcher(session, **{"Last-Event-ID": last_seen})
    resumed.wait_changes(1)
    holds_for(lambda: resumed.changes() == 1, duration=0.5, message="the change announced once, not twice")
    assert resumed.events[0].id.startswith("get.") and resumed.events[0].id != last_seen


def test_a_stream_whose_lock_went_to_another_ends_and_leaves_that_lock_alone(orm, http, server, gamma):
    """The lock of a session's GET stream lapses only when its process stalled for its whole
    life; if another stream took it meanwhile, the first one's keep-alive must not renew the
    newcomer's lock (two streams would then hold one), and the first stream ends."""
    session = _session(http, server, "live-gamma", gamma["keys"]["plain"])
    watcher = Watcher(session)
    wait_for(lambda: watcher.events, message="the stream's priming event")
    lock = names.standalone_lock_key(session.session_id)
    sync_redis().set(lock, "another-process:1:1", ex=30)  # as if it lapsed and went to another stream
    assert watcher.closed.wait(10), "the stream that lost its lock ends at its next keep-alive"
    assert sync_redis().get(lock) == b"another-process:1:1"
    assert sync_redis().ttl(lock) <= 30, "the newcomer's lock is not renewed by the stream that lost it"


def _admin_edit_in_thread(superuser: Any, name: str, description: str) -> None:
    """What an admin does: the Tool change form, posted (from a thread of an async test)."""
    try:
        tool = Tool.objects.get(name=name)
        admin = DjangoClient()
        admin.force_login(superuser)
        data = tool_data(
            tenant=str(tool.tenant_id),
            name=name,
            description=description,
            input_schema='{"type": "object"}',
            tags=f'["{name}"]',
            read_only_hint="unknown",
        )
        response = admin.post(f"/admin/tools_app/tool/{tool.pk}/change/", data)
        assert response.status_code == 302, response.content[:2000]
    finally:
        connection.close()


def test_sdk_listen_stream_hears_an_admin_edit_on_each_process(orm, live_servers, gamma):
    """2026-07-28: the SDK in auto mode holds a subscriptions/listen stream on each server;
    an admin edit reaches both."""

    async def listen_and_edit() -> None:
        async with contextlib.AsyncExitStack() as stack:
            subscriptions = []
            for server in live_servers:
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {gamma['keys']['plain']}"}, timeout=30)
                )
                client = await stack.enter_async_context(
                    Client(streamable_http_client(server.endpoint("live-gamma"), http_client=http), mode="auto")
                )
                assert client.session.protocol_version == "2026-07-28"
                subscriptions.append(await stack.enter_async_context(client.listen(tools_list_changed=True)))
            await asyncio.to_thread(_admin_edit_in_thread, gamma["superuser"], "gamma_open", "heard on listen")
            for subscription in subscriptions:
                event = await asyncio.wait_for(subscription.__anext__(), 10)
                assert isinstance(event, ToolsListChanged)

    asyncio.run(listen_and_edit())


def test_sdk_client_list_changed_handler(orm, server, gamma):
    seen = asyncio.Event()
    session_ids: list[str] = []

    async def scenario() -> None:
        async def on_message(message: Any) -> None:
            root = getattr(message, "root", message)
            if getattr(root, "method", None) == LIST_CHANGED:
                seen.set()

        async def remember_session(response: httpx2.Response) -> None:
            if session_id := response.headers.get("mcp-session-id"):
                session_ids.append(session_id)

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {gamma['keys']['plain']}"},
            timeout=30,
            event_hooks={"response": [remember_session]},
        )
        async with Client(
            streamable_http_client(server.endpoint("live-gamma"), http_client=http),
            mode="legacy",
            message_handler=on_message,
        ) as client:
            await client.list_tools()
            # The SDK opens its GET stream after initialization; wait until the server has
            # registered it for changes (see Watcher).
            digest = names.session_digest_key(session_ids[0])
            await wait_for_async(lambda: sync_redis().exists(digest), message="the SDK's GET stream")
            await asyncio.to_thread(_edit_in_thread, "gamma_open", "seen by the SDK")
            await asyncio.wait_for(seen.wait(), 10)

    asyncio.run(scenario())


def _admin(user: Any) -> DjangoClient:
    client = DjangoClient()
    client.force_login(user)
    return client


def test_live_sessions_view_lists_and_ends_sessions(orm, http, server, other_server, gamma):
    session = _session(http, server, "live-gamma", gamma["keys"]["plain"])
    watcher = Watcher(session)
    page = _admin(gamma["superuser"]).get("/admin/live-sessions/")
    assert page.status_code == 200
    rows = {row.id: row for row in page.context["rows"]}
    row = rows[session.session_id]
    assert row.tenant.slug == "live-gamma"
    assert row.client == "toolbay-tests 1.0" and row.protocol_version == "2025-11-25"
    assert row.credential.startswith("gamma plain (") and gamma["keys"]["plain"] not in page.content.decode()
    assert row.stream_holder is not None  # "<host>:<pid>" of the process holding the GET stream

    # An operator of another tenant neither sees it nor can end it.
    stranger = _admin(gamma["stranger"])
    assert session.session_id not in stranger.get("/admin/live-sessions/").content.decode()
    refused = stranger.post("/admin/live-sessions/", {"tenant": "live-gamma", "session": session.session_id})
    assert refused.status_code == 404
    refused = stranger.post("/admin/live-sessions/", {"tenant": "live-beta", "session": session.session_id})
    assert refused.status_code == 404
    assert session.post(rpc("ping")).status_code == 200

    ended = _admin(gamma["operator"]).post(
        "/admin/live-sessions/", {"tenant": "live-gamma", "session": session.session_id}
    )
    assert ended.status_code == 302
    assert watcher.closed.wait(10), "ending the session closes its stream"
    session.endpoint = other_server.endpoint("live-gamma")
    assert session.post(rpc("ping")).status_code == 404


def test_idle_sessions_expire(orm, http, gamma, tmp_path):
    from tests.mcp.live import start_server

    short = start_server(tmp_path, "short-idle", {"MCP_SESSION_IDLE_SECONDS": "3"})
    try:
        session = _session(http, short, "live-gamma", gamma["keys"]["plain"])
        assert session.post(rpc("ping")).status_code == 200
        key = names.session_key(session.session_id)
        assert 0 < sync_redis().ttl(key) <= 3  # each request renews the 3 s idle timer
        # Left alone, the session's key expires in Redis after those 3 s.
        wait_for(lambda: not sync_redis().exists(key), timeout=20, message="the idle session to expire")
        assert session.post(rpc("ping")).status_code == 404
        rows = _admin(gamma["superuser"]).get("/admin/live-sessions/").context["rows"]
        assert session.session_id not in {row.id for row in rows}
    finally:
        short.stop()
