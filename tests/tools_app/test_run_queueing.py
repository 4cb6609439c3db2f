"""The message that queues a run is the one Celery's own producer writes, field by field.

Where the broker is the platform's Redis, a run's accepting transaction pushes the message
itself (``queueing.accepting``) instead of blocking the event loop on Celery's producer;
these tests put both on the real queue in Redis and compare them, so an upgrade of Celery
or kombu that changes the envelope fails here, not on a worker.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from celery import current_app
from django.conf import settings

from mcp_platform.redis_clients import sync_redis
from tools_app.runs import queueing

# Each message's own identities; everything else must be equal.
PER_MESSAGE = {
    ("headers", "id"),
    ("headers", "root_id"),
    ("properties", "correlation_id"),
    ("properties", "delivery_tag"),
}


def _queued(queue: str) -> dict[str, Any]:
    raw = sync_redis().rpop(settings.CELERY_BROKER_KEY_PREFIX + queue)
    assert raw is not None, f"nothing on {queue}"
    return dict(json.loads(raw))


def _comparable(envelope: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part, value in envelope.items():
        if isinstance(value, dict):
            out[part] = {k: v for k, v in value.items() if (part, k) not in PER_MESSAGE}
        elif part == "body":
            out[part] = json.loads(base64.b64decode(value))
        else:
            out[part] = value
    return out


@pytest.fixture
def empty_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queues of this test's own: the live tests' workers consume the real ones."""
    for name in ("SHORT_QUEUE", "LONG_QUEUE"):
        queue = f"toolbay.test-{name.lower()}-{uuid.uuid4().hex[:8]}"
        monkeypatch.setattr(queueing, name, queue)


@pytest.mark.parametrize("time_limit", [None, 95])
def test_the_message_matches_celerys_send_task(empty_queues: None, time_limit: int | None) -> None:
    assert queueing.broker_is_platform_redis()
    options: dict[str, Any] = {"ignore_result": True} | ({"time_limit": time_limit} if time_limit else {})
    current_app.send_task(queueing.EXECUTE_RUN, args=["run-1"], queue=queueing.SHORT_QUEUE, **options)
    celerys = _queued(queueing.SHORT_QUEUE)
    sync_redis().lpush(
        settings.CELERY_BROKER_KEY_PREFIX + queueing.SHORT_QUEUE,
        queueing.message("run-1", queueing.SHORT_QUEUE, time_limit),
    )
    ours = _queued(queueing.SHORT_QUEUE)
    assert _comparable(ours) == _comparable(celerys)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    assert ours["properties"]["delivery_tag"] != celerys["properties"]["delivery_tag"]


def test_queue_pushes_one_message_per_run_on_the_tools_queue(empty_queues: None) -> None:
    async_to_sync(queueing.queue)("run-2", None)
    async_to_sync(queueing.queue)("run-3", None)
    first, second = _queued(queueing.SHORT_QUEUE), _queued(queueing.SHORT_QUEUE)
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in (first, second)] == [["run-2"], ["run-3"]]
    assert first["headers"]["id"] != second["headers"]["id"]
