"""Every tools/call leaves one Invocation row with the right outcome, through the real path."""

from __future__ import annotations

import time
from typing import Any

import pytest

from audit.models import Invocation
from mcp_platform.mcp import names
from mcp_platform.mcp.calls import request_key
from mcp_platform.redis_clients import sync_redis
from tenants.models import Tenant
from tenants.services import api_key_create
from tests.mcp.wire import McpSession, headers, note, rpc
from tests.poll import wait_for

pytestmark = pytest.mark.live


@pytest.fixture
def alpha(http, server, live_world, live_workers) -> McpSession:
    return McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])


def _row(session: McpSession, tool: str, **filters: Any) -> Invocation:
    """The call's row, once the server's recorder has flushed it (every 0.5 s)."""
    return wait_for(
        lambda: Invocation.objects.filter(session_id=session.session_id, tool_name=tool, **filters).first(),
        message=f"the invocation row of {tool} {filters}",
    )


def _call(session: McpSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return session.request("tools/call", {"name": tool, "arguments": arguments})


@pytest.mark.parametrize(
    ("tool", "arguments", "outcome", "message"),
    [
        ("echo", {"text": "hi"}, "completed", ""),
        ("test_error_handling", {}, "error", "intentionally returns an error"),
        ("echo", {"text": 42}, "invalid_arguments", "'text' failed rule 'type'"),
        ("inline_timeout", {"n": 5}, "timed_out", "timed out after 0.3 seconds"),
        ("inline_crash", {}, "failed", "internal error (reference"),
        ("bg_timeout", {"count": 50}, "timed_out", "timed out after 0.5 seconds"),
        ("bg_echo", {"text": "from a worker"}, "completed", ""),
    ],
)
def test_each_outcome_is_recorded(orm, alpha, live_world, tool, arguments, outcome, message):
    _call(alpha, tool, arguments)
    row = _row(alpha, tool)
    assert row.outcome == outcome
    assert message in row.error_message
    assert "secret detail" not in row.error_message  # internal errors never leak their text
    assert row.tenant.slug == "live-alpha"
    assert row.key_id == live_world.key_ids["alpha"] and row.key_label.startswith("live alpha (")
    assert live_world.keys["alpha"] not in row.key_label
    assert row.client_name == ("toolbay-tests" if not tool.startswith("bg_") else "")
    assert row.duration_ms is not None and row.duration_ms >= 0
    assert row.tool_version is not None
    assert (row.run_id != "") == tool.startswith("bg_")


def test_sensitive_arguments_are_redacted(orm, alpha):
    _call(alpha, "secret_echo", {"text": "visible", "password": "hunter2", "profile": {"token": "t0k", "city": "Oslo"}})
    row = _row(alpha, "secret_echo")
    assert row.arguments == {
        "text": "visible",
        "password": "[redacted]",
        "profile": {"token": "[redacted]", "city": "Oslo"},
    }


def test_denied_calls_are_recorded_and_rate_limited(orm, http, alpha, server, live_world):
    # A key of its own: the 30-a-minute allowance is per credential.
    _, key = api_key_create(tenant=Tenant.objects.get(slug="live-alpha"), name=f"denied {time.time_ns()}")
    session = McpSession.open(http, server.endpoint("live-alpha"), key)
    for _ in range(40):
        _call(session, "no_such_tool_here", {})
    # A call recorded after the 40: the recorder writes its rows in order, so once this
    # one is in the database, every row the denied calls left is too.
    _call(session, "echo", {"text": "after the denied calls"})
    _row(session, "echo")
    rows = Invocation.objects.filter(session_id=session.session_id, tool_name="no_such_tool_here")
    assert rows.count() == 30 and {r.outcome for r in rows} == {"denied"}

    refused = http.post(server.endpoint("live-alpha"), json=rpc("ping"), headers=headers(live_world.keys["revoked"]))
    assert refused.status_code == 401
    wait_for(
        Invocation.objects.filter(tenant__slug="live-alpha", key_label="(refused credential)").exists,
        message="the refused credential's invocation row",
    )


def test_cancelled_calls_are_recorded(orm, http, alpha, other_server):
    pending = alpha.post_in_thread(rpc("tools/call", {"name": "countdown", "arguments": {"n": 30}}, id=77))
    # The running call registers itself for cancellations (after 50 ms); cancel it then.
    inflight = names.inflight_key(alpha.session_id, request_key(77))
    wait_for(lambda: sync_redis().exists(inflight), message="the countdown to be running")
    cancel = note("notifications/cancelled", {"requestId": 77})
    assert http.post(other_server.endpoint("live-alpha"), json=cancel, headers=alpha.headers()).status_code == 202
    pending.response()
    assert _row(alpha, "countdown").outcome == "cancelled"


def test_tasks_are_recorded_with_their_run(orm, alpha):
    created = alpha.request("tools/call", {"name": "task_only_echo", "arguments": {"text": "t"}, "task": {}})
    task_id = created["result"]["task"]["taskId"]
    alpha.request("tasks/result", {"taskId": task_id})
    row = _row(alpha, "task_only_echo")
    assert row.is_task and row.run_id == task_id and row.outcome == "completed"
