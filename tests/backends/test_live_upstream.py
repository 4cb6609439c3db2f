"""Upstream MCP servers end to end: the official SDK's server on loopback behind a live
Toolbay server (uvicorn), driven by the official SDK client, with `listen_upstreams`
running as its own process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult, ToolListChangedNotification

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tenants.services import api_key_create, tenant_create
from tests.backends.upstream_server import SdkUpstream
from tests.mcp.live import ROOT, LiveServer, database_url, start_server
from tests.poll import wait_for, wait_for_async
from tools_app.backends.upstream.federation import upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import secret_set
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

TOKEN = "live-upstream-token-9d2c"
TENANT = "live-upstreams"


@dataclass
class World:
    upstream: SdkUpstream
    server: LiveServer
    key: str
    upstream_id: int
    tmp: Path


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    upstream = SdkUpstream(TOKEN).start()
    tmp = tmp_path_factory.mktemp("upstreams")
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=TENANT, name="Live upstreams")
        _, key = api_key_create(tenant=tenant, name="live upstream key")
        secret = secret_set(tenant=tenant, name="upstream-token", value=TOKEN)
        registered = UpstreamServer(
            tenant=tenant,
            name="sdk",
            url=upstream.url,
            auth="bearer",
            secret=secret,
            tool_prefix="up.",
            tags=["from-upstream"],
            publish_new_tools=True,
        )
        registered.full_clean()
        registered.save()
        access_rule_grant_pattern(tenant=tenant, pattern="tag:from-upstream")
    server = start_server(tmp, "toolbay-upstreams", {"TOOLBAY_OUTBOUND_ALLOWED_HOSTS": upstream.host_port})
    yield World(upstream, server, key, registered.pk, tmp)
    server.stop()
    upstream.stop()


@pytest.fixture
def refreshed(world: World, django_db_blocker: Any, settings: Any) -> World:
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = [world.upstream.host_port]
    with django_db_blocker.unblock():
        upstream_refresh(upstream_id=world.upstream_id)
    return world


async def _all_tools(client: Client) -> dict[str, Any]:
    """tools/list, every page (the live servers page by 3)."""
    tools: dict[str, Any] = {}
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.update((tool.name, tool) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _client(world: World, session_ids: list[str] | None = None, **callbacks: Any) -> Client:
    """An SDK client of the Toolbay server; the MCP session ids it is given go to ``session_ids``."""

    async def remember_session(response: httpx2.Response) -> None:
        if session_ids is not None and (session_id := response.headers.get("mcp-session-id")):
            session_ids.append(session_id)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {world.key}"}, timeout=30, event_hooks={"response": [remember_session]}
    )
    return Client(streamable_http_client(world.server.endpoint(TENANT), http_client=http), mode="legacy", **callbacks)


def test_a_proxied_call_passes_progress_and_logs_to_the_client(refreshed):
    async def scenario() -> None:
        progress: list[tuple[float, float | None, str | None]] = []
        logs: list[Any] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        async def on_log(params: Any) -> None:
            logs.append(params.data)

        async with _client(refreshed, logging_callback=on_log) as client:
            listed = await _all_tools(client)
            assert {"up.count", "up.add", "up.strict"} <= set(listed)
            assert listed["up.add"].annotations.read_only_hint is True

            counted = await client.call_tool("up.count", {"n": 3}, progress_callback=on_progress)
            assert counted.is_error is False
            assert counted.content[0].text == "counted to 3"
            assert progress == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]
            assert logs == ["reached 1", "reached 2", "reached 3"]

            summed = await client.call_tool("up.add", {"a": 2, "b": 40})
            assert summed.structured_content == {"result": 42}

            refused = await client.call_tool("up.strict", {"value": "no"})
            assert refused.is_error is True
            expected = "The upstream server sdk refused the call: strict refuses 'no' (error -32602)."
            assert refused.content[0].text == expected

    asyncio.run(scenario())


def test_elicitation_of_the_upstream_is_answered_by_the_toolbay_client(refreshed):
    async def scenario() -> None:
        asked: list[str] = []

        async def elicit(context: Any, params: Any) -> ElicitResult:
            asked.append(params.message)
            return ElicitResult(action="accept", content={"name": "Ada"})

        async with _client(refreshed, elicitation_callback=elicit) as client:
            result = await client.call_tool("up.ask", {"question": "What is your name?"})
        assert asked == ["What is your name?"]
        assert result.is_error is False
        assert result.content[0].text == "hello Ada"

    asyncio.run(scenario())


def _start_listener(world: World) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": os.environ.get("TOOLBAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": world.upstream.host_port,
        # Only list_changed may trigger the refresh this test waits for.
        "TOOLBAY_UPSTREAM_REFRESH_SECONDS": "0",
    }
    log = (world.tmp / "listener.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "listen_upstreams", "--sync-seconds", "1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return process


@pytest.fixture
def listener(refreshed: World) -> Iterator[Path]:
    process = _start_listener(refreshed)
    log = refreshed.tmp / "listener.log"
    try:
        # The listener lists the tools on its session and then opens the standing GET stream.
        wait_for(
            lambda: "GET" in refreshed.upstream.methods,
            timeout=20,
            message=lambda: f"the listener's GET stream; its log:\n{log.read_text() if log.exists() else ''}",
        )
        yield log
    finally:
        process.terminate()
        process.wait(10)


def test_upstream_list_changed_triggers_a_refresh_that_clients_see(refreshed, listener, django_db_blocker):
    world = refreshed

    async def scenario() -> float:
        async with _client(world) as client:
            before = set(await _all_tools(client))
            assert "up.fresh" not in before
            world.upstream.add_tool("fresh", "A tool the upstream added while Toolbay was running.")
            announced = time.monotonic()
            assert world.upstream.announce() >= 1

            async def listed_with_fresh() -> set[str] | None:
                tools = set(await _all_tools(client))
                return tools if "up.fresh" in tools else None

            after = await wait_for_async(listed_with_fresh, timeout=20, message="up.fresh in tools/list")
            seen_after = time.monotonic() - announced
            assert after == before | {"up.fresh"}
            fresh = await client.call_tool("up.fresh", {"text": "hello"})
            assert fresh.content[0].text == "fresh: hello"
            return seen_after

    seen_after = asyncio.run(scenario())
    assert seen_after < 5
    text = listener.read_text()
    assert "announced a change of its tools" in text and "added up.fresh" in text


def test_upstream_list_changed_reaches_connected_clients_as_list_changed(refreshed, listener):
    world = refreshed

    async def scenario() -> None:
        changed = asyncio.Event()
        session_ids: list[str] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                changed.set()

        async with _client(world, session_ids, message_handler=on_message) as client:
            await _all_tools(client)
            # The SDK opens its GET stream after initialization; it hears of changes once the
            # server has registered it (and stored the session's visible-tools fingerprint).
            digest = names.session_digest_key(session_ids[0])
            await wait_for_async(lambda: sync_redis().exists(digest), message="the client's GET stream")
            world.upstream.add_tool("newer", "Another tool the upstream added.")
            announced = time.monotonic()
            assert world.upstream.announce() >= 1
            await asyncio.wait_for(changed.wait(), timeout=15)
            # Measured with this test (-s, 5 runs): 0.30-0.38 s, of which 0.2 s is the listener's debounce.
            print(f"upstream list_changed → Toolbay client list_changed: {time.monotonic() - announced:.3f} s")
            assert "up.newer" in await _all_tools(client)

    asyncio.run(scenario())
