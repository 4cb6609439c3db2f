"""Packaged MCP servers end to end: real packages from PyPI (``mcp-server-time``) and npm
(``@modelcontextprotocol/server-everything``) added with ``add_upstream``, installed into the
package cache, run by a live ``run_packaged`` runner, and called with the official SDK client
through two live Toolbay servers (uvicorn)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.test import Client as WebClient
from mcp_types import ElicitResult, ResourceUpdatedNotification

from tests.backends.packaged import (
    METRICS_TOKEN,
    TIME_PACKAGE,
    World,
    all_tools,
    instance_status,
    running_pid,
    sdk_client,
)
from tests.poll import wait_for, wait_for_async
from tools_app.backends.packaged.operations import instance_control
from tools_app.backends.packaged.sandbox import LIMITS
from tools_app.backends.upstream.models import UpstreamServer

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


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
        async with sdk_client(world, "pk-alpha", server=0) as client:
            names = await all_tools(client)
            assert {"time.get_current_time", "time.convert_time", "ev.echo", "ev.get-sum"} <= names
            now = await client.call_tool("time.get_current_time", {"timezone": "Europe/Paris"})
            assert now.is_error is False
            assert json.loads(now.content[0].text)["timezone"] == "Europe/Paris"
        async with sdk_client(world, "pk-alpha", server=1) as client:
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
        async with sdk_client(world, "pk-alpha", server=1) as client:
            resources = (await client.list_resources()).resources
            documents = [r for r in resources if str(r.uri).startswith("demo://resource/static/document/")]
            assert documents, [str(r.uri) for r in resources]
            read = await client.read_resource(documents[0].uri)
            assert read.contents and read.contents[0].text  # type: ignore[union-attr]
            prompt = await client.get_prompt("ev.simple-prompt")
            assert prompt.messages[0].content.text == "This is a simple prompt without arguments."  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_progress_of_the_everything_server_reaches_thesdk_client(world: World) -> None:
    async def scenario() -> None:
        progress: list[tuple[float, float | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total))

        async with sdk_client(world, "pk-alpha", server=1) as client:
            result = await client.call_tool(
                "ev.trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=on_progress
            )
        assert result.is_error is False
        assert progress == [(1, 3), (2, 3), (3, 3)]

    asyncio.run(scenario())


def test_elicitation_of_the_everything_server_is_answered_by_thesdk_client(world: World) -> None:
    async def scenario() -> None:
        asked: list[str] = []

        async def elicit(context: Any, params: Any) -> ElicitResult:
            asked.append(params.message)
            return ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

        async with sdk_client(world, "pk-alpha", server=0, elicitation_callback=elicit) as client:
            result = await client.call_tool("ev.trigger-elicitation-request", {})
        assert asked == ["Please provide inputs for the following fields:"]
        assert result.is_error is False
        text = "\n".join(block.text for block in result.content)
        assert "- Name: Ada Lovelace" in text and "- Agreed to terms: true" in text

    asyncio.run(scenario())


def test_two_tenants_with_the_same_package_never_share_an_instance(world: World) -> None:
    async def scenario() -> None:
        for slug in ("pk-alpha", "pk-beta"):
            async with sdk_client(world, slug) as client:
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


def test_the_runner_serves_per_instance_metrics_to_the_scraper_only(world: World) -> None:
    upstream, tenant = world.upstreams["everything@pk-beta"], world.tenant_ids["pk-beta"]

    async def call() -> None:
        async with sdk_client(world, "pk-beta") as client:
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
    assert packaged["limits"] == [LIMITS]


def test_operators_see_instances_and_stop_one(world: World, django_db_blocker: Any) -> None:
    upstream, tenant = world.upstreams["time"], world.tenant_ids["pk-alpha"]

    async def call() -> str:
        async with sdk_client(world, "pk-alpha") as mcp:
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

        async with sdk_client(world, "pk-alpha", server=1, message_handler=on_message) as client:
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
