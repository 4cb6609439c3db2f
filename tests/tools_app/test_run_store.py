"""A run's change script on the real Redis: what it runs with the change (``then``: a call's
response and invocation row) happens once, only for the party that makes the change, and
what goes ahead of it (``before``: the stream's producer record) happens first either way."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from mcp_platform.redis_clients import sync_redis
from tools_app.runs import store
from tools_app.runs.models import ToolRun, new_run_id


def _accepted() -> str:
    now = timezone.now()
    run = ToolRun(id=new_run_id(), tenant_id=1, tool_name="echo", created_at=now, updated_at=now)
    async_to_sync(store.create)(run, None)
    return run.id


def _finish(run_id: str, **extra: Any) -> int:
    changes = {"status": ToolRun.Status.COMPLETED, "finished_at": timezone.now()}
    return int(async_to_sync(store.transition)(run_id, changes, statuses=ToolRun.ACTIVE, **extra))


def test_then_runs_once_with_the_change_that_records_the_outcome() -> None:
    run_id, delivered = _accepted(), f"test:delivered:{uuid.uuid4().hex}"
    then = [("RPUSH", delivered, "response"), ("RPUSH", delivered, "row")]
    assert _finish(run_id, then=then) > 0
    assert _finish(run_id, then=then) == 0  # ended already: someone else recorded it
    assert sync_redis().lrange(delivered, 0, -1) == [b"response", b"row"]
    assert sync_redis().hget(store.run_key(run_id), "status") == b"completed"


def test_before_goes_first_whatever_becomes_of_the_change() -> None:
    run_id, producer = _accepted(), f"test:producer:{uuid.uuid4().hex}"
    assert _finish(run_id, before=[("SET", producer, "worker-1")]) > 0
    assert _finish(run_id, before=[("SET", producer, "worker-2")]) == 0
    assert sync_redis().get(producer) == b"worker-2"


def test_finishers_racing_at_the_same_moment_deliver_one_outcome_once() -> None:
    """A worker's result, a client's cancellation and the reaper's failure of one run, sent
    at once: one of them records the outcome, and only its response and row go out."""
    run_id, delivered = _accepted(), f"test:delivered:{uuid.uuid4().hex}"
    outcomes = [ToolRun.Status.COMPLETED, ToolRun.Status.CANCELLED, ToolRun.Status.FAILED] * 4

    async def race() -> list[int]:
        return await asyncio.gather(
            *(
                store.transition(
                    run_id,
                    {"status": status, "finished_at": timezone.now()},
                    statuses=ToolRun.ACTIVE,
                    then=[("RPUSH", delivered, f"response:{status}"), ("RPUSH", delivered, f"row:{status}")],
                )
                for status in outcomes
            )
        )

    versions = async_to_sync(race)()
    winners = [status for status, version in zip(outcomes, versions, strict=True) if version > 0]
    assert len(winners) == 1
    assert sync_redis().lrange(delivered, 0, -1) == [f"response:{winners[0]}".encode(), f"row:{winners[0]}".encode()]
    assert sync_redis().hget(store.run_key(run_id), "status") == winners[0].encode()
