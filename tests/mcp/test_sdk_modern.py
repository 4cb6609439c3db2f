"""The official MCP Python SDK on the 2026-07-28 revision against both live servers.

Auto mode discovers the revision; every request goes to the next server in turn (a
load balancer with no affinity), so multi-round calls, tasks and pages continue on a
process other than the one that began them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, TextContent

from audit.models import Invocation, Outcome
from tests.mcp import sdk_modern
from tests.mcp.sdk_modern import RoundRobin, TasksExtension
from tests.poll import wait_for

pytestmark = pytest.mark.live


def _port(server: Any) -> int:
    port = urlsplit(server.url).port
    assert port is not None
    return port


@contextlib.asynccontextmanager
async def _client(
    servers: list[Any], key: str, transport: httpx2.AsyncBaseTransport | None = None, **options: Any
) -> AsyncIterator[Client]:
    """An auto-mode client of the first server's endpoint (``transport`` may send elsewhere)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30, transport=transport) as http:
        transport_ = streamable_http_client(servers[0].endpoint("live-alpha"), http_client=http)
        async with Client(transport_, mode="auto", **options) as client:
            yield client


async def _ada(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada", "confirm": True})


def test_auto_mode_discovers_the_stateless_revision(live_servers, live_world):
    async def scenario() -> None:
        balancer = RoundRobin([_port(server) for server in live_servers])
        progress: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        async with _client(live_servers, live_world.keys["alpha"], balancer) as client:
            assert client.session.protocol_version == "2026-07-28"
            listed, cursor = [], None
            while True:  # pages of 3, each page from the next server
                page = await client.list_tools(cursor=cursor)
                listed += [tool.name for tool in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert {"echo", "add", "countdown", "slow_compute", "test_tool_with_task"} <= set(listed)
            assert listed == sorted(listed)
            echoed = await client.call_tool("echo", {"text": "héllo"})
            assert echoed.content == [TextContent(type="text", text="héllo")]
            counted = await client.call_tool("countdown", {"n": 3}, progress_callback=on_progress)
            assert counted.content[0].text == "Countdown from 3 finished."
            assert progress == [1, 2, 3]
        assert len(balancer.served) == 2

    asyncio.run(scenario())


def test_multi_round_elicitation_continues_on_the_other_server(live_servers, live_world, orm):
    async def scenario() -> None:
        balancer = RoundRobin([_port(server) for server in live_servers])
        async with _client(live_servers, live_world.keys["alpha"], balancer, elicitation_callback=_ada) as client:
            served_before = dict(balancer.served)
            result = await client.call_tool("test_input_required_result_elicitation", {})
            assert result.content[0].text == "Hello, Ada!"
        # The round that asked and the retry that answered went to different processes.
        assert all(balancer.served[port] > served_before.get(port, 0) for port in balancer.served)

    asyncio.run(scenario())
    rows = Invocation.objects.filter(tool_name="test_input_required_result_elicitation", protocol_version="2026-07-28")
    wait_for(
        lambda: {Outcome.INPUT_REQUIRED, Outcome.COMPLETED} <= set(rows.values_list("outcome", flat=True)),
        message="the round that asked and the one that answered, in the invocation log",
    )


def test_missing_capability_is_error_32021(live_servers, live_world):
    async def scenario() -> None:
        async with _client(live_servers, live_world.keys["alpha"]) as client:  # no sampling callback
            with pytest.raises(MCPError) as excinfo:
                await client.call_tool("test_missing_capability", {})
        assert excinfo.value.error.code == -32021
        assert excinfo.value.error.data == {"requiredCapabilities": {"sampling": {}}}

    asyncio.run(scenario())


def test_a_task_that_asks_runs_on_a_worker_and_is_answered_through_tasks_update(
    live_servers, live_world, live_workers, orm
):
    async def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert method == "elicitation/create"
        return {"action": "accept", "content": {"confirm": True}}

    tasks = TasksExtension(answer)

    async def scenario() -> None:
        balancer = RoundRobin([_port(server) for server in live_servers])
        async with _client(
            live_servers, live_world.keys["alpha"], balancer, extensions=[tasks], elicitation_callback=_ada
        ) as client:
            result = await client.call_tool("confirm_delete", {"filename": "notes.txt"})
        assert result.content[0].text == "Deleted notes.txt."

    asyncio.run(scenario())
    (created,) = tasks.created
    statuses = [state.status for state in tasks.seen]
    assert "input_required" in statuses and statuses[-1] == "completed"
    asked = next(state for state in tasks.seen if state.status == "input_required")
    assert list(asked.input_requests or {}) == ["confirm"]
    task_row = Invocation.objects.filter(call_id=f"run-{created.task_id}")
    row = wait_for(lambda: task_row.first(), message="the task's row")
    assert (row.outcome, row.protocol_version, row.is_task) == (Outcome.COMPLETED, "2026-07-28", True)


def test_input_gathered_in_rounds_then_a_task(live_servers, live_world, live_workers):
    tasks = TasksExtension()

    async def scenario() -> None:
        balancer = RoundRobin([_port(server) for server in live_servers])
        async with _client(
            live_servers, live_world.keys["alpha"], balancer, extensions=[tasks], elicitation_callback=_ada
        ) as client:
            result = await client.call_tool("test_tool_with_task", {})
        assert result.content[0].text == "Hello, Ada! (greeted by a task)"

    asyncio.run(scenario())
    assert len(tasks.created) == 1


def test_tasks_are_cancelled_idempotently_and_tool_errors_complete(live_servers, live_world, live_workers):
    tasks = TasksExtension()

    async def scenario() -> None:
        async with _client(live_servers, live_world.keys["alpha"], extensions=[tasks]) as client:
            session = client.session
            created = await session.call_tool("slow_compute", {"seconds": 60}, allow_claimed=True)
            assert isinstance(created, sdk_modern.TaskCreated)
            assert created.status == "working" and created.ttl_ms and created.poll_interval_ms
            await sdk_modern.cancel(session, created.task_id)
            await sdk_modern.cancel(session, created.task_id)  # again: the same acknowledgement
            assert (await tasks.follow(session, created.task_id)).status == "cancelled"

            failing = await session.call_tool("failing_job", {}, allow_claimed=True)
            assert isinstance(failing, sdk_modern.TaskCreated)
            ended = await tasks.follow(session, failing.task_id)
            assert ended.status == "completed" and ended.result is not None and ended.result["isError"] is True

            crashed = await session.call_tool("protocol_error_job", {}, allow_claimed=True)
            assert isinstance(crashed, sdk_modern.TaskCreated)
            ended = await tasks.follow(session, crashed.task_id)
            assert ended.status == "failed" and ended.result is None
            assert ended.error == {"code": -32603, "message": "The job crashed before it could produce a result."}

            with pytest.raises(MCPError) as excinfo:
                await sdk_modern.get(session, "no-such-task")
            assert excinfo.value.error.code == -32602

    asyncio.run(scenario())


def test_without_the_tasks_extension_task_tools_answer_inline_or_refuse(live_servers, live_world, live_workers):
    async def scenario() -> None:
        async with _client(live_servers, live_world.keys["alpha"]) as client:
            result = await client.call_tool("slow_compute", {"seconds": 0, "label": "now"})
            assert result.content[0].text == "Computed now in 0 s."
            with pytest.raises(MCPError) as excinfo:  # task support "required"
                await client.call_tool("failing_job", {})
            assert excinfo.value.error.code == -32021
            assert excinfo.value.error.data == {
                "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
            }
            with pytest.raises(MCPError) as excinfo:
                await sdk_modern.get(client.session, "any")
            assert excinfo.value.error.code == -32021

    asyncio.run(scenario())


def test_a_listen_stream_hears_a_change_made_on_the_other_server(live_servers, live_world):
    first, second = live_servers

    async def scenario() -> None:
        async with (
            _client([first], live_world.keys["alpha"]) as listener,
            _client([second], live_world.keys["alpha"]) as changer,
        ):
            async with listener.listen(tools_list_changed=True) as subscription:
                changed = await changer.call_tool("test_trigger_tool_change", {})
                assert changed.content[0].text == "The tool list changed."
                with anyio.fail_after(10):
                    event = await subscription.__anext__()
            assert isinstance(event, ToolsListChanged)

    asyncio.run(scenario())
