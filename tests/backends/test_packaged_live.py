"""Packaged MCP servers end to end: real packages from PyPI (``mcp-server-time``) and npm
(``@modelcontextprotocol/server-everything``) added with ``add_upstream``, installed into the
package cache, run by a live ``run_packaged`` runner, and called with the official SDK client
through two live Toolbay servers (uvicorn)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client as WebClient
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult, ResourceUpdatedNotification

from tenants.services import api_key_create, tenant_create
from tests.backends.packaged import (
    EVERYTHING_PACKAGE,
    PACKAGE_CACHE,
    TIME_PACKAGE,
    LiveRunner,
    instance_status,
    running_pid,
    start_runner,
)
from tests.mcp.live import LiveServer, start_server, stop_together
from tests.poll import wait_for, wait_for_async
from tools_app.backends.packaged.operations import instance_control
from tools_app.backends.upstream.federation import upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.models import AccessRule
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


METRICS_TOKEN = "runner-metrics-7f3a"


@dataclass
class World:
    servers: list[LiveServer]
    runner: LiveRunner
    keys: dict[str, str]
    tenant_ids: dict[str, int]
    upstreams: dict[str, int]
    published: dict[str, str]
    tmp: Path


def _add(name: str, tenant: str, *source: str) -> tuple[int, str]:
    out = io.StringIO()
    call_command("add_upstream", name, "--tenant", tenant, *source, "--publish-all", "--grant", stdout=out)
    server = UpstreamServer.objects.get(tenant__slug=tenant, name=name)
    return server.pk, out.getvalue()


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("packaged")
    # The two Toolbay servers boot while the runner starts and the servers are added (each takes
    # seconds of imports on a busy machine; one after the other they would add up).
    booting = ThreadPoolExecutor(max_workers=2)
    pending = [booting.submit(start_server, tmp, name) for name in ("toolbay-a", "toolbay-b")]
    keys: dict[str, str] = {}
    tenant_ids: dict[str, int] = {}
    upstreams: dict[str, int] = {}
    published: dict[str, str] = {}
    runner: LiveRunner | None = None
    try:
        runner = start_runner(tmp, extra_env={"METRICS_TOKEN": METRICS_TOKEN})
        with django_db_blocker.unblock(), override_settings(TOOLBAY_PACKAGE_CACHE=str(PACKAGE_CACHE)):
            for slug in ("pk-alpha", "pk-beta"):
                tenant = tenant_create(slug=slug, name=slug)
                tenant_ids[slug] = tenant.pk
                _, keys[slug] = api_key_create(tenant=tenant, name=f"{slug} key")
            upstreams["time"], published["time"] = _add(
                "time", "pk-alpha", "--pypi", "==".join(TIME_PACKAGE), "--prefix", "time."
            )
            for slug in ("pk-alpha", "pk-beta"):
                upstreams[f"everything@{slug}"], published[f"everything@{slug}"] = _add(
                    "everything", slug, "--npm", "@".join(EVERYTHING_PACKAGE), "--prefix", "ev."
                )
            # alpha's everything server also mirrors its resources and prompts.
            mirrored = UpstreamServer.objects.get(pk=upstreams["everything@pk-alpha"])
            mirrored.import_resources_and_prompts = True
            mirrored.save()
            upstream_refresh(upstream_id=mirrored.pk)
            access_rule_grant_pattern(tenant=mirrored.tenant, pattern="tag:mcp:everything", kind=AccessRule.Kind.ANY)
        servers = [future.result() for future in pending]
    except BaseException:
        for future in pending:
            if future.exception() is None:
                future.result().stop()
        if runner is not None:
            runner.stop()
        raise
    finally:
        booting.shutdown()
    yield World(servers, runner, keys, tenant_ids, upstreams, published, tmp)
    stop_together([server.process for server in servers], grace=10)
    runner.stop()


def _client(world: World, tenant: str, server: int = 0, **callbacks: Any) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.keys[tenant]}"}, timeout=60)
    endpoint = world.servers[server].endpoint(tenant)
    return Client(streamable_http_client(endpoint, http_client=http), mode="legacy", **callbacks)


async def _all_tools(client: Client) -> set[str]:
    names: set[str] = set()
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names.update(tool.name for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return names


def test_add_upstream_prints_one_line_per_published_tool(world: World) -> None:
    lines = world.published["time"].splitlines()
    assert lines == ["published time.convert_time  convert_time", "published time.get_current_time  get_current_time"]
    everything = world.published["everything@pk-alpha"].splitlines()
    assert "published ev.echo  echo" in everything
    assert "published ev.trigger-elicitation-request  trigger-elicitation-request" in everything


def test_install_is_pinned_and_its_integrity_recorded(world: World, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock():
        time_server = UpstreamServer.objects.get(pk=world.upstreams["time"])
        everything = UpstreamServer.objects.get(pk=world.upstreams["everything@pk-alpha"])
    assert (time_server.kind, time_server.package, time_server.version) == ("pypi", *TIME_PACKAGE)
    assert time_server.install_state == "installed" and time_server.integrity.startswith("sha256:")
    assert everything.install_state == "installed" and everything.integrity.startswith("sha512-")


def test_sdk_client_lists_and_calls_packaged_tools_on_both_servers(world: World) -> None:
    async def scenario() -> None:
        async with _client(world, "pk-alpha", server=0) as client:
            names = await _all_tools(client)
            assert {"time.get_current_time", "time.convert_time", "ev.echo", "ev.get-sum"} <= names
            now = await client.call_tool("time.get_current_time", {"timezone": "Europe/Paris"})
            assert now.is_error is False
            assert json.loads(now.content[0].text)["timezone"] == "Europe/Paris"
        async with _client(world, "pk-alpha", server=1) as client:
            converted = await client.call_tool(
                "time.convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
            )
            assert converted.is_error is False
            assert json.loads(converted.content[0].text)["target"]["datetime"].endswith("21:00:00+09:00")
            echoed = await client.call_tool("ev.echo", {"message": "hello through the runner"})
            assert echoed.content[0].text == "Echo: hello through the runner"
            summed = await client.call_tool("ev.get-sum", {"a": 2, "b": 40})
            assert "42" in summed.content[0].text

    asyncio.run(scenario())


def test_resources_and_prompts_of_a_packaged_server_are_served_as_an_upstream_s(world: World) -> None:
    async def scenario() -> None:
        async with _client(world, "pk-alpha", server=1) as client:
            resources = (await client.list_resources()).resources
            documents = [r for r in resources if str(r.uri).startswith("demo://resource/static/document/")]
            assert documents, [str(r.uri) for r in resources]
            read = await client.read_resource(documents[0].uri)
            assert read.contents and read.contents[0].text  # type: ignore[union-attr]
            prompt = await client.get_prompt("ev.simple-prompt")
            assert prompt.messages[0].content.text == "This is a simple prompt without arguments."  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_progress_of_the_everything_server_reaches_the_client(world: World) -> None:
    async def scenario() -> None:
        progress: list[tuple[float, float | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total))

        async with _client(world, "pk-alpha", server=1) as client:
            result = await client.call_tool(
                "ev.trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
            )
        assert result.is_error is False
        assert progress == [(1, 3), (2, 3), (3, 3)]

    asyncio.run(scenario())


def test_elicitation_of_the_everything_server_is_answered_by_the_client(world: World) -> None:
    async def scenario() -> None:
        asked: list[str] = []

        async def elicit(context: Any, params: Any) -> ElicitResult:
            asked.append(params.message)
            return ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

        async with _client(world, "pk-alpha", server=0, elicitation_callback=elicit) as client:
            result = await client.call_tool("ev.trigger-elicitation-request", {})
        assert asked == ["Please provide inputs for the following fields:"]
        assert result.is_error is False
        text = "\n".join(block.text for block in result.content)
        assert "- Name: Ada Lovelace" in text and "- Agreed to terms: true" in text

    asyncio.run(scenario())


def test_two_tenants_with_the_same_package_never_share_an_instance(world: World) -> None:
    async def scenario() -> None:
        for slug in ("pk-alpha", "pk-beta"):
            async with _client(world, slug) as client:
                result = await client.call_tool("ev.echo", {"message": slug})
                assert result.content[0].text == f"Echo: {slug}"

    asyncio.run(scenario())
    alpha = instance_status(world.upstreams["everything@pk-alpha"], world.tenant_ids["pk-alpha"])
    beta = instance_status(world.upstreams["everything@pk-beta"], world.tenant_ids["pk-beta"])
    assert alpha is not None and beta is not None
    assert alpha["state"] == beta["state"] == "running"
    assert alpha["pid"] != beta["pid"] and alpha["url"] != beta["url"] and alpha["token"] != beta["token"]
    # Neither tenant can reach the other's instance: beta's server is not in alpha's catalog,
    # and an instance answers only its own token.
    assert instance_status(world.upstreams["everything@pk-beta"], world.tenant_ids["pk-alpha"]) is None


def test_killing_an_instance_mid_call_ends_the_call_and_the_next_call_starts_a_fresh_one(world: World) -> None:
    upstream, tenant = world.upstreams["everything@pk-alpha"], world.tenant_ids["pk-alpha"]

    async def scenario() -> None:
        async with _client(world, "pk-alpha", server=0) as client:
            await client.call_tool("ev.echo", {"message": "warm"})
            pid = running_pid(upstream, tenant)
            assert pid is not None
            started: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                if not started:
                    started.append(time.monotonic())
                    os.kill(pid, signal.SIGKILL)  # the instance dies in the middle of the call

            call = client.call_tool(
                "ev.trigger-long-running-operation", {"duration": 60, "steps": 60}, progress_callback=on_progress
            )
            result = await asyncio.wait_for(call, 20)
            ended_after = time.monotonic() - started[0]
            assert result.is_error is True
            assert "ended during the call" in result.content[0].text
            assert ended_after < 5

            def answers_again() -> bool:
                again = asyncio.run_coroutine_threadsafe(
                    client.call_tool("ev.echo", {"message": "again"}), loop
                ).result(30)
                return again.is_error is False

            loop = asyncio.get_running_loop()
            await asyncio.to_thread(wait_for, answers_again, timeout=30, message="a call after the restart")
            fresh = running_pid(upstream, tenant)
            assert fresh is not None and fresh != pid
            status = instance_status(upstream, tenant)
            assert status is not None and status["restarts"] >= 1 and "signal 9" in status["last_error"]

    asyncio.run(scenario())


def test_the_runner_serves_per_instance_metrics_to_the_scraper_only(world: World) -> None:
    upstream, tenant = world.upstreams["everything@pk-beta"], world.tenant_ids["pk-beta"]

    async def call() -> None:
        async with _client(world, "pk-beta") as client:
            await client.call_tool("ev.echo", {"message": "metrics"})

    asyncio.run(call())
    status = instance_status(upstream, tenant)
    assert status is not None
    metrics_url = status["url"].split("/i/")[0] + "/metrics"
    assert httpx2.get(metrics_url, timeout=10).status_code == 401
    scraped = httpx2.get(metrics_url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert scraped.status_code == 200
    labels = f'scope="{upstream}:{tenant}",upstream="{upstream}",tenant="{tenant}"'
    lines = dict(line.rsplit(" ", 1) for line in scraped.text.splitlines() if line.startswith("toolbay_"))
    assert lines[f"toolbay_packaged_instance_up{{{labels}}}"] == "1"
    assert int(lines[f"toolbay_packaged_instance_memory_bytes{{{labels}}}"]) > 10 * 2**20
    assert int(lines[f"toolbay_packaged_instance_calls_total{{{labels}}}"]) >= 1


def test_readyz_says_whether_untrusted_packages_run(world: World) -> None:
    body = httpx2.get(f"{world.servers[1].url}/readyz", timeout=10).json()
    assert body["status"] == "ok"
    packaged = body["packaged_servers"]
    assert packaged["runners"] == 1
    expected = "sandboxed" if packaged["sandbox"] != ["none"] else "run without a sandbox (TOOLBAY_SANDBOX_OPTOUT)"
    assert packaged["untrusted_packages"] == expected


def test_operators_see_instances_and_stop_one(world: World, django_db_blocker: Any) -> None:
    upstream, tenant = world.upstreams["time"], world.tenant_ids["pk-alpha"]

    async def call() -> str:
        async with _client(world, "pk-alpha") as mcp:
            result = await mcp.call_tool("time.get_current_time", {"timezone": "UTC"})
            return str(json.loads(result.content[0].text)["timezone"])

    assert asyncio.run(call()) == "UTC"
    pid = running_pid(upstream, tenant)
    with django_db_blocker.unblock():
        users = get_user_model().objects
        admin, stranger = WebClient(), WebClient()
        admin.force_login(users.create_superuser("pk-admin", password="x"))
        # Staff of no tenant: they cannot see or stop it (the same 404 as a missing instance).
        stranger.force_login(users.create_user("pk-stranger", password="x", is_staff=True))
        page = admin.get("/admin/packaged-instances/")
        assert page.status_code == 200
        html = page.content.decode()
        assert f'value="{upstream}:{tenant}"' in html and "mcp-server-time@2026.10.19" in html and str(pid) in html
        assert f'value="{upstream}:{tenant}"' not in stranger.get("/admin/packaged-instances/").content.decode()
        refused = stranger.post("/admin/packaged-instances/", {"scope": f"{upstream}:{tenant}", "action": "stop"})
        assert refused.status_code == 404
        assert running_pid(upstream, tenant) == pid
        stopped = admin.post("/admin/packaged-instances/", {"scope": f"{upstream}:{tenant}", "action": "stop"})
        assert stopped.status_code == 302
    wait_for(lambda: instance_status(upstream, tenant) is None, timeout=10, message="the instance to stop")
    assert asyncio.run(call()) == "UTC"  # the next call starts a fresh instance
    assert running_pid(upstream, tenant) not in (None, pid)


def test_a_packaged_servers_resource_updates_reach_toolbays_subscribers(world: World, django_db_blocker: Any) -> None:
    """The runner subscribes to the mirrored resources when its instance imports them, and
    passes the server's ``notifications/resources/updated`` on to Toolbay's subscribers (the
    everything server sends one per subscribed URI when its toggle-subscriber-updates tool
    turns updates on, then every 5 s)."""
    upstream, tenant = world.upstreams["everything@pk-alpha"], world.tenant_ids["pk-alpha"]
    pid = running_pid(upstream, tenant)
    with django_db_blocker.unblock():
        # A fresh instance imports with mirroring on (the fixture turned it on after the first import).
        assert instance_control(scope=f"{upstream}:{tenant}", action="restart", tenant_ids=None)
    wait_for(lambda: running_pid(upstream, tenant) not in (None, pid), timeout=30, message="the restarted instance")

    async def scenario() -> None:
        heard: list[str] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, ResourceUpdatedNotification):
                heard.append(str(message.params.uri))

        async with _client(world, "pk-alpha", server=1, message_handler=on_message) as client:
            resources = (await client.list_resources()).resources
            (watched, *_) = [str(r.uri) for r in resources if str(r.uri).startswith("demo://resource/static/")]
            await client.subscribe_resource(watched)
            toggled = await client.call_tool("ev.toggle-subscriber-updates", {})
            assert toggled.is_error is False, toggled.content
            await wait_for_async(
                lambda: watched in heard,
                timeout=15,
                message=lambda: f"an update of {watched}; the runner's log:\n{world.runner.log()[-3000:]}",
            )

    asyncio.run(scenario())
