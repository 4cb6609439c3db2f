"""Every outcome kind goes through the recorder into one Invocation row and the metrics
(unit level; tests/mcp/test_invocation_log.py drives the same through real MCP calls)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from audit.models import Invocation
from audit.recorder import invocation, recorder
from mcp_platform.metrics import CALLS


@pytest.mark.django_db(transaction=True)
async def test_each_outcome_becomes_one_row_and_one_count(acme):
    CALLS.clear()
    try:
        started = timezone.now()
        for outcome in Invocation.Outcome.values:
            recorder.add(
                invocation(
                    tenant_id=acme.pk,
                    key_id=None,
                    key_label="anonymous",
                    session_id="recorder-test",
                    tool_name=f"tool_{outcome}",
                    arguments={"password": "hunter2", "q": "x"},
                    input_schema={"type": "object", "properties": {"password": {"x-sensitive": True}}},
                    outcome=outcome,
                    error_message="" if outcome == "completed" else f"{outcome} happened",
                    started_at=started,
                    duration_ms=1.5,
                )
            )
        await recorder.drain()  # what the ASGI lifespan does on shutdown
        rows = await sync_to_async(list)(Invocation.objects.filter(session_id="recorder-test").order_by("id"))
    finally:
        await sync_to_async(connections.close_all)()
    assert [row.outcome for row in rows] == Invocation.Outcome.values
    assert all(row.tool_name == f"tool_{row.outcome}" for row in rows)
    assert all(row.arguments == {"password": "[redacted]", "q": "x"} for row in rows)
    calls, latency = CALLS.snapshot()
    assert {key[2]: count for key, count in calls.items() if key[0] == acme.pk} == dict.fromkeys(
        Invocation.Outcome.values, 1
    )
    assert all(sum(buckets) == 1 for (tenant_id, _), (buckets, _) in latency.items() if tenant_id == acme.pk)
    CALLS.clear()
