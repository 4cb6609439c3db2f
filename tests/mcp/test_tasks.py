"""MCP tasks (2025-11-25, experimental) on real workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tests.mcp.wire import McpSession, parse_sse
from tests.poll import wait_for
from tools_app.runs import store
from tools_app.runs.models import ToolRun
from tools_app.runs.services import purge_expired_runs

pytestmark = pytest.mark.live
RELATED = "io.modelcontextprotocol/related-task"


@pytest.fixture
def alpha(http, server, live_world, live_workers) -> McpSession:
    return McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])


def _create(session: McpSession, name: str, arguments: dict, **task: int) -> dict:
    answer = session.request("tools/call", {"name": name, "arguments": arguments, "task": task})
    assert "result" in answer, answer
    return answer["result"]["task"]


def test_capability_and_tool_execution_field(http, server, live_world, live_workers):
    response = http.post(
        server.endpoint("live-alpha"),
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers={
            "Authorization": f"Bearer {live_world.keys['alpha']}",
            "Accept": "application/json, text/event-stream",
        },
    )
    capabilities = response.json()["result"]["capabilities"]
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def test_task_lifecycle_get_result_list(alpha):
    task = _create(alpha, "slow_count", {"count": 3}, ttl=60000)
    assert task["status"] == "working" and task["ttl"] == 60000 and task["pollInterval"] == 1000
    assert {"taskId", "createdAt", "lastUpdatedAt"} <= set(task)
    got = alpha.request("tasks/get", {"taskId": task["taskId"]})["result"]
    assert got["taskId"] == task["taskId"] and got["status"] in ("working", "completed")

    result = alpha.request("tasks/result", {"taskId": task["taskId"]})["result"]  # blocks until done
    assert result["content"] == [{"type": "text", "text": "Counted to 3."}]
    assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    assert alpha.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "completed"

    listed = alpha.request("tasks/list")["result"]
    assert task["taskId"] in [t["taskId"] for t in listed["tasks"]]


def test_tasks_list_pages(alpha):
    ids = [_create(alpha, "task_only_echo", {"text": str(i)})["taskId"] for i in range(4)]
    seen, cursor = [], None
    while True:
        page = alpha.request("tasks/list", {"cursor": cursor} if cursor else {})["result"]
        seen += [t["taskId"] for t in page["tasks"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert set(ids) <= set(seen) and len(seen) == len(set(seen))
    assert alpha.request("tasks/list", {"cursor": "bogus"})["error"]["code"] == -32602


def test_cancel_a_running_task(alpha):
    task = _create(alpha, "slow_count", {"count": 200})
    # Running: a worker executes it and has registered the run's channel (task id = run id).
    running = names.run_channel_key(task["taskId"])
    wait_for(lambda: sync_redis().exists(running), timeout=30, message="a worker to run the task")
    cancelled = alpha.request("tasks/cancel", {"taskId": task["taskId"]})["result"]
    assert cancelled["status"] == "cancelled"
    again = alpha.request("tasks/cancel", {"taskId": task["taskId"]})
    assert again["error"] == {"code": -32602, "message": "Cannot cancel task: already in terminal status 'cancelled'"}
    assert alpha.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "cancelled"


def test_task_support_is_enforced(alpha):
    required = alpha.request("tools/call", {"name": "task_only_echo", "arguments": {"text": "x"}})
    assert required["error"]["code"] == -32601
    forbidden = alpha.request("tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}})
    assert forbidden["error"]["code"] == -32601
    task = _create(alpha, "task_only_echo", {"text": "as a task"})
    result = alpha.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["content"][0]["text"] == "as a task"


def test_tool_error_fails_the_task(alpha):
    task = _create(alpha, "slow_count", {"count": "many"})
    result = alpha.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["isError"] is True
    assert alpha.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "failed"


def test_tasks_belong_to_their_credential(http, server, live_world, alpha):
    task = _create(alpha, "task_only_echo", {"text": "mine"})
    other_key = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha2"])
    other_tenant = McpSession.open(http, server.endpoint("live-beta"), live_world.keys["beta"])
    for stranger in (other_key, other_tenant):
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            answer = stranger.request(method, {"taskId": task["taskId"]})
            assert answer["error"] == {"code": -32602, "message": "Failed to retrieve task: Task not found"}
        assert task["taskId"] not in [t["taskId"] for t in stranger.request("tasks/list")["result"]["tasks"]]
    # Same credential, new session: still the owner's task.
    same_key = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    assert same_key.request("tasks/get", {"taskId": task["taskId"]})["result"]["taskId"] == task["taskId"]


def test_status_notification_on_the_standalone_stream(http, alpha):
    with http.stream("GET", alpha.endpoint, headers=alpha.headers(Accept="text/event-stream")) as stream:
        lines = stream.iter_lines()
        for _ in range(3):
            next(lines)  # priming event
        task = _create(alpha, "task_only_echo", {"text": "notify me"})
        collected: list[str] = []
        for line in lines:
            collected.append(line)
            events = [e for e in parse_sse(collected) if e.data]
            if any(e.message["params"]["status"] == "completed" for e in events):
                break
    status = next(e.message for e in events if e.message["params"]["status"] == "completed")
    assert status["method"] == "notifications/tasks/status"
    assert status["params"]["taskId"] == task["taskId"]


def test_expired_tasks_are_gone_and_purged(orm, alpha):
    task = _create(alpha, "task_only_echo", {"text": "short-lived"}, ttl=60000)
    alpha.request("tasks/result", {"taskId": task["taskId"]})
    # Time passing: the ended run's row is written, its live state's grace is over (gone
    # from Redis), and its TTL is over.
    wait_for(
        lambda: ToolRun.objects.filter(pk=task["taskId"], status=ToolRun.Status.COMPLETED).exists(),
        message="the task's row",
    )
    sync_redis().delete(store.run_key(task["taskId"]))
    ToolRun.objects.filter(pk=task["taskId"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert alpha.request("tasks/get", {"taskId": task["taskId"]})["error"]["code"] == -32602
    assert purge_expired_runs() >= 1
    assert not ToolRun.objects.filter(pk=task["taskId"]).exists()
