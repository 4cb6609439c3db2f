"""Runs are written behind: accepted into Redis, their rows written by the audit writer's process.

While the session's writer is paused (SIGSTOP) nothing writes rows: a task accepted and run
then is answered by the tasks API from its live state alone. A writer that took its changes
and died before committing (it read them from the stream as a member of the group and never
acknowledged) leaves them pending; the writer that goes on claims and writes them, and an
older state delivered again never overwrites a newer one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from mcp_platform.redis_clients import sync_redis
from tests.mcp.live import run_now
from tests.mcp.wire import McpSession
from tests.poll import wait_for
from tools_app.runs import store
from tools_app.runs.models import ToolRun
from tools_app.runs.writer import GROUP, upsert

pytestmark = pytest.mark.live


@pytest.fixture
def paused_writer(live_audit_writer: Any) -> Iterator[None]:
    os.kill(live_audit_writer.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(live_audit_writer.process.pid, signal.SIGCONT)


def _pending_for(task_id: str) -> list[bytes]:
    """The change entries of this run still in the stream."""
    entries = sync_redis().xrange(store.CHANGES_KEY)
    return [entry_id for entry_id, fields in entries if fields.get(b"id") == task_id.encode()]


def test_a_task_not_yet_written_is_read_from_its_live_state_and_written_after_a_writer_dies(
    orm, http, server, live_world, live_workers, live_audit_writer
):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    os.kill(live_audit_writer.process.pid, signal.SIGSTOP)
    try:
        answer = session.request("tools/call", {"name": "task_only_echo", "arguments": {"text": "behind"}, "task": {}})
        task_id = answer["result"]["task"]["taskId"]
        result = session.request("tasks/result", {"taskId": task_id})
        assert result["result"]["content"][0]["text"] == "behind"
        assert not ToolRun.objects.filter(pk=task_id).exists()  # nothing wrote it yet
        assert session.request("tasks/get", {"taskId": task_id})["result"]["status"] == "completed"
        listed = session.request("tasks/list", {})["result"]["tasks"]
        assert task_id in [task["taskId"] for task in listed]
        # Another credential of the same tenant sees nothing of it, written or not.
        other = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha2"])
        assert other.request("tasks/get", {"taskId": task_id})["error"]["code"] == -32602
        assert task_id not in [task["taskId"] for task in other.request("tasks/list", {})["result"]["tasks"]]

        # A writer takes the changes (as the group's member "doomed") and dies before committing.
        redis = sync_redis()
        try:
            redis.xgroup_create(store.CHANGES_KEY, GROUP, id="0", mkstream=True)
        except Exception as exc:  # the group exists already (the paused writer made it)
            assert "BUSYGROUP" in str(exc)
        taken = redis.xreadgroup(GROUP, "doomed", {store.CHANGES_KEY: ">"}, count=10_000)
        assert _pending_for(task_id), "the run's changes are still in the stream"
        assert any(fields.get(b"id") == task_id.encode() for _, batch in taken for _, fields in batch)
    finally:
        os.kill(live_audit_writer.process.pid, signal.SIGCONT)
    # The writer that goes on claims what the dead one took (idle 1 s here) and writes the run.
    row = wait_for(
        lambda: ToolRun.objects.filter(pk=task_id, status=ToolRun.Status.COMPLETED).first(),
        timeout=30,
        message="the run's row, written after the writer that took it died",
    )
    live = run_now(row)
    assert row.version == live.version and row.result == live.result
    assert row.arguments == {"text": "behind"} and row.attempts == 1 and row.worker_id
    wait_for(lambda: not _pending_for(task_id), message="the run's changes acknowledged and deleted")
    assert task_id.encode() not in sync_redis().zrange(store.UNWRITTEN_KEY, 0, -1)

    # An older state delivered again (a redelivery) never overwrites the newer row.
    older = run_now(row)
    older.status, older.version, older.result = ToolRun.Status.WORKING, 1, None
    upsert([older])
    row.refresh_from_db()
    assert row.status == ToolRun.Status.COMPLETED and row.version == live.version


def test_a_cancellation_is_decided_on_the_live_state(orm, http, server, live_world, live_workers, paused_writer):
    """With no row yet, exactly one party ends a run: a second cancellation finds it ended."""
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    answer = session.request("tools/call", {"name": "slow_count", "arguments": {"count": 50}, "task": {}})
    task_id = answer["result"]["task"]["taskId"]
    first = session.request("tasks/cancel", {"taskId": task_id})
    assert first["result"]["status"] == "cancelled"
    second = session.request("tasks/cancel", {"taskId": task_id})
    assert "already in terminal status 'cancelled'" in second["error"]["message"]
    assert not ToolRun.objects.filter(pk=task_id).exists()
    run = async_to_sync(store.load)(task_id)
    assert run is not None and run.status == ToolRun.Status.CANCELLED
