"""Background calls on real Celery workers: progress, answers, cancellation, timeouts,
retries and worker death."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tests.mcp.live import run_now
from tests.mcp.wire import McpSession, note, parse_sse, rpc
from tests.poll import wait_for
from tools_app.runs.models import ToolRun

pytestmark = pytest.mark.live


@pytest.fixture
def alpha(http, server, live_world, live_workers) -> McpSession:
    return McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    return [e.message for e in parse_sse(response.text.split("\n")) if e.data]


def _run_for(request_id: Any, session: McpSession) -> ToolRun:
    return wait_for(
        lambda: ToolRun.objects.filter(session_id=session.session_id, request_id=request_id).first(),
        message=f"the run of request {request_id!r}",
    )


def _running(request_id: Any, session: McpSession) -> ToolRun:
    """The call's run, once its handler runs on a worker: the worker has registered the
    run's channel in Redis (where cancellations go)."""
    run = _run_for(request_id, session)
    wait_for(
        lambda: sync_redis().exists(names.run_channel_key(run.id)),
        timeout=30,
        message=f"a worker to run request {request_id!r}",
    )
    run = run_now(run)
    return run


def _cancel(endpoint: str, session: McpSession, request_id: Any) -> None:
    cancel = note("notifications/cancelled", {"requestId": request_id})
    assert httpx.post(endpoint, json=cancel, headers=session.headers()).status_code == 202


def test_sdk_client_gets_background_progress_in_order(server, live_world, live_workers):
    progress: list[float] = []

    async def scenario() -> str:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {live_world.keys['alpha']}"}, timeout=60)
        async with Client(streamable_http_client(server.endpoint("live-alpha"), http_client=http), mode="legacy") as c:
            result = await c.call_tool("slow_count", {"count": 5}, progress_callback=on_progress)
            return result.content[0].text

    assert asyncio.run(scenario()) == "Counted to 5."
    assert progress == [1, 2, 3, 4, 5]


def test_worker_handler_asks_the_client_and_continues(server, live_world, live_workers):
    async def scenario() -> str:
        async def elicit(context: Any, params: Any) -> ElicitResult:
            return ElicitResult(action="accept", content={"username": "lin", "email": "lin@example.com"})

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {live_world.keys['alpha']}"}, timeout=60)
        async with Client(
            streamable_http_client(server.endpoint("live-alpha"), http_client=http),
            mode="legacy",
            elicitation_callback=elicit,
        ) as c:
            result = await c.call_tool("bg_elicit", {"message": "Who?"})
            return result.content[0].text

    assert "lin@example.com" in asyncio.run(scenario())


def test_same_result_shape_as_inline(alpha):
    background = alpha.request("tools/call", {"name": "bg_echo", "arguments": {"text": "same"}})
    inline = alpha.request("tools/call", {"name": "echo", "arguments": {"text": "same"}})
    assert background["result"] == inline["result"] == {"content": [{"type": "text", "text": "same"}]}


def test_cancellation_stops_a_background_call(orm, alpha, other_server):
    started = time.monotonic()
    pending = alpha.post_in_thread(
        rpc("tools/call", {"name": "slow_count", "arguments": {"count": 200}, "_meta": {"progressToken": 1}}, id=501)
    )
    run = _running(501, alpha)
    _cancel(other_server.endpoint("live-alpha"), alpha, 501)
    response = pending.response()
    assert time.monotonic() - started < 6  # 200 steps would take 20 s
    assert all("method" in m for m in _messages(response)), "no response for a cancelled request"
    run = run_now(run)
    assert run.status == ToolRun.Status.CANCELLED


def test_handler_ignoring_cancellation_gets_its_process_killed(orm, alpha, other_server):
    pending = alpha.post_in_thread(rpc("tools/call", {"name": "bg_stubborn", "arguments": {"seconds": 30}}, id=502))
    run = _running(502, alpha)
    _cancel(other_server.endpoint("live-alpha"), alpha, 502)
    pending.response()
    run = run_now(run)
    assert run.status == ToolRun.Status.CANCELLED
    pid = run.worker_pid
    wait_for(lambda: not _alive(pid), message=f"the worker process {pid} to be killed")
    # The pool replaced the process; calls keep working.
    assert (
        alpha.request("tools/call", {"name": "bg_echo", "arguments": {"text": "after"}})["result"]["content"][0]["text"]
        == "after"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_timeout_is_a_tool_error(alpha):
    answer = alpha.request("tools/call", {"name": "bg_timeout", "arguments": {"count": 50}})
    assert answer["result"]["isError"] is True
    assert "timed out after 0.5 seconds" in answer["result"]["content"][0]["text"]


def test_handler_blocking_past_its_timeout_gets_its_process_killed(orm, alpha):
    answer = alpha.request("tools/call", {"name": "bg_stubborn_timeout", "arguments": {"seconds": 30}})
    assert answer["result"]["isError"] is True
    assert "timed out after 1 seconds" in answer["result"]["content"][0]["text"]
    run = wait_for(  # the call ended (with its timeout error); nothing hangs
        lambda: ToolRun.objects.filter(
            session_id=alpha.session_id, tool_name="bg_stubborn_timeout", status=ToolRun.Status.COMPLETED
        ).first(),
        message="the completed run's row",
    )
    wait_for(lambda: not _alive(run.worker_pid), message=f"the worker process {run.worker_pid} to be killed")


def _kill_mid_call(alpha: McpSession, tool: str, request_id: int) -> tuple[dict[str, Any], ToolRun]:
    pending = alpha.post_in_thread(rpc("tools/call", {"name": tool, "arguments": {"count": 15}}, id=request_id))
    run = _running(request_id, alpha)  # its handler is counting (15 steps of 0.1 s)
    os.kill(run.worker_pid, signal.SIGKILL)
    response = pending.response()
    run = run_now(run)
    messages = _messages(response)
    assert messages and "method" not in messages[-1], f"no response in {messages} ({run.status}, {run.status_message})"
    return messages[-1], run


def test_killed_worker_reruns_an_idempotent_call(orm, alpha):
    final, run = _kill_mid_call(alpha, "slow_count", 601)
    assert final["result"]["content"][0]["text"] == "Counted to 15."
    assert run.status == ToolRun.Status.COMPLETED and run.attempts == 2


def test_killed_worker_fails_a_non_idempotent_call(orm, alpha):
    final, run = _kill_mid_call(alpha, "bg_count_once", 602)
    assert final["result"]["isError"] is True
    assert "not retried because the tool is not marked idempotent" in final["result"]["content"][0]["text"]
    assert run.status == ToolRun.Status.FAILED and run.attempts == 1


@pytest.mark.parametrize(
    ("tool", "fails", "expected"),
    [
        ("bg_flaky", 2, "succeeded on attempt 3"),
        ("inline_flaky", 2, "succeeded on attempt 3"),
        ("inline_flaky_once", 1, None),  # not idempotent: no retry
    ],
)
def test_transient_failures_are_retried_only_for_idempotent_tools(alpha, tool, fails, expected):
    answer = alpha.request("tools/call", {"name": tool, "arguments": {"key": uuid.uuid4().hex, "fails": fails}})
    if expected is None:
        assert answer["result"]["isError"] is True
        assert "transient failure 1" in answer["result"]["content"][0]["text"]
    else:
        assert answer["result"]["content"][0]["text"] == expected


def test_long_calls_do_not_starve_short_ones(orm, http, alpha):
    # Two long calls (slow_count: timeout 120 s, "toolbay.long") occupy worker-b; a short
    # background call is served by worker-a meanwhile.
    pending = [
        alpha.post_in_thread(rpc("tools/call", {"name": "slow_count", "arguments": {"count": 30}}, id=f"long-{i}"))
        for i in range(2)
    ]
    runs = [_run_for(f"long-{i}", alpha) for i in range(2)]  # both queued (worker-b runs one at a time)
    wait_for(
        lambda: any(sync_redis().exists(names.run_channel_key(run.id)) for run in runs),
        timeout=30,
        message="worker-b to run one of the long calls",
    )
    started = time.monotonic()
    answer = alpha.request("tools/call", {"name": "bg_echo", "arguments": {"text": "quick"}})
    assert answer["result"]["content"][0]["text"] == "quick"
    assert time.monotonic() - started < 2.5
    for i, call in enumerate(pending):  # done with them: cancelled, not waited for
        _cancel(alpha.endpoint, alpha, f"long-{i}")
        call.response()
