"""Operator approval (confirmation policy ``operator``) against live servers and workers: the
call waits until an operator of the tenant decides, on its stream (inline, legacy), on a
worker (background), or as a task (2026-07-28 with the tasks extension); nobody decides
their own call; no decision in time ends the call. The backend counts every run.

The operator decides through the approvals service here (the console page that calls it is
driven by a browser in tests/audit/test_live_approvals.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from audit.models import ConfirmationOutcome, Invocation, Outcome
from tenants.models import Tenant
from tenants.scope import tenant_scope
from tenants.services import api_key_create, membership_set
from tests.mcp.sdk_modern import TasksExtension
from tests.poll import wait_for
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import access_rule_grant_pattern
from tools_app.runs.approvals import ApprovalRefused, approval_decide
from tools_app.runs.models import Approval

pytestmark = pytest.mark.live

SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "token": {"type": "string", "writeOnly": True}},
    "required": ["key"],
}
TOOLS: dict[str, dict[str, Any]] = {
    "guarded_inline": {"timeout_seconds": 20},
    "guarded_background": {"execution_mode": "background", "task_support": "optional", "timeout_seconds": 20},
    "guarded_quick": {"timeout_seconds": 1.5},
}


@pytest.fixture(scope="module")
def guarded(live_world: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    users = get_user_model().objects
    with django_db_blocker.unblock():
        alpha = Tenant.objects.get(slug="live-alpha")
        olga, pete = users.create_user("approval-olga"), users.create_user("approval-pete")
        for user in (olga, pete):
            membership_set(tenant=alpha, user=user, role="operator")
        _, olgas_key = api_key_create(tenant=alpha, name="olga's key", created_by=olga)
        tools = []
        for name, fields in TOOLS.items():
            tool = Tool(
                name=name,
                title=f"Guarded {name}",
                description="Transfers money.",
                input_schema=SCHEMA,
                backend_config={"handler": "testing.record_run"},
                tags=["guarded"],
                confirmation="operator",
                **fields,
            )
            tool.full_clean()
            tool.save()
            tools.append(tool)
        rule = access_rule_grant_pattern(tenant=alpha, pattern="tag:guarded")
    yield {"olga": olga, "pete": pete, "olgas_key": olgas_key}
    with django_db_blocker.unblock():
        AccessRule.objects.filter(pk=rule.pk).delete()
        Tool.objects.filter(pk__in=[tool.pk for tool in tools]).delete()
        users.filter(pk__in=[olga.pk, pete.pk]).delete()


def _runs(key: str) -> int:
    return int(redis.Redis.from_url(settings.REDIS_URL).llen(f"test:runs:{key}"))


@contextlib.asynccontextmanager
async def _client(server: Any, key: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        transport = streamable_http_client(server.endpoint("live-alpha"), http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            yield client


def _pending(key: str) -> Approval:
    rows = Approval.objects.filter(arguments__key=key, status=Approval.Status.PENDING)
    return wait_for(lambda: rows.first(), timeout=20, message=f"the pending approval of {key}")


def _decide(user: Any, approval_id: str, approve: bool) -> Approval:
    return approval_decide(
        scope=tenant_scope(SimpleNamespace(user=user)), user=user, approval_id=approval_id, approve=approve
    )


def _closing(decide: Any) -> Approval:
    """Run ``decide`` and close the database connection this thread opened (the test
    database cannot be dropped while it is open)."""
    try:
        return decide()
    finally:
        connection.close()


def _call_and_decide(
    server: Any, api_key: str, mode: str, tool: str, key: str, decide: Any, **options: Any
) -> tuple[CallToolResult, Approval | None]:
    """Call ``tool``; meanwhile wait for its approval and hand it to ``decide`` (in a thread:
    the ORM is synchronous)."""

    async def scenario() -> tuple[CallToolResult, Approval | None]:
        async with _client(server, api_key, mode, **options) as client:
            call = asyncio.ensure_future(client.call_tool(tool, {"key": key, "token": "s3cret"}))
            decided = await asyncio.to_thread(_closing, decide) if decide is not None else None
            return await call, decided

    return asyncio.run(scenario())


@pytest.mark.parametrize("tool", ["guarded_inline", "guarded_background"])
@pytest.mark.parametrize("approve", [True, False], ids=["approve", "deny"])
def test_an_operator_decides_a_waiting_call(server, live_world, live_workers, guarded, orm, tool, approve):
    key = uuid.uuid4().hex

    def decide() -> Approval:
        pending = _pending(key)
        assert pending.arguments == {"key": key, "token": "[redacted]"}
        assert pending.requested_by.startswith("live alpha") and pending.tool_title == f"Guarded {tool}"
        return _decide(guarded["pete"], pending.pk, approve)

    result, approval = _call_and_decide(server, live_world.keys["alpha"], "legacy", tool, key, decide)
    assert approval is not None and approval.decided_by == guarded["pete"]
    assert result.is_error is not approve
    assert _runs(key) == (1 if approve else 0)
    if not approve:
        assert "operator declined" in result.content[0].text
    outcome = ConfirmationOutcome.GRANTED if approve else ConfirmationOutcome.DECLINED
    row = wait_for(
        lambda: Invocation.objects.filter(arguments__key=key, confirmation=outcome).first(), message="the call's row"
    )
    assert row.confirmed_by == "operator approval-pete" and row.confirmed_at is not None
    assert row.outcome == (Outcome.COMPLETED if approve else Outcome.NOT_CONFIRMED)


def test_a_modern_client_with_tasks_waits_as_a_task(server, live_world, live_workers, guarded, orm):
    key, tasks = uuid.uuid4().hex, TasksExtension(timeout=40)

    def decide() -> Approval:
        return _decide(guarded["pete"], _pending(key).pk, True)

    result, _ = _call_and_decide(
        server, live_world.keys["alpha"], "auto", "guarded_background", key, decide, extensions=[tasks]
    )
    assert len(tasks.created) == 1 and result.content[0].text == f"ran {key}"
    assert Approval.objects.get(arguments__key=key).run_id == tasks.created[0].task_id
    assert _runs(key) == 1


def test_nobody_decides_their_own_call(server, live_world, guarded, orm):
    key = uuid.uuid4().hex

    def decide() -> Approval:
        pending = _pending(key)
        with pytest.raises(ApprovalRefused, match="your own call"):
            _decide(guarded["olga"], pending.pk, True)  # olga made the key the call came with
        assert _runs(key) == 0
        return _decide(guarded["pete"], pending.pk, True)

    result, _ = _call_and_decide(server, guarded["olgas_key"], "legacy", "guarded_inline", key, decide)
    assert result.is_error is False and _runs(key) == 1


def test_no_decision_in_time_ends_the_call(server, live_world, guarded, orm):
    key = uuid.uuid4().hex
    result, _ = _call_and_decide(server, live_world.keys["alpha"], "legacy", "guarded_quick", key, None)
    assert result.is_error is True and "within 1.5 seconds" in result.content[0].text
    approval = wait_for(
        lambda: Approval.objects.filter(arguments__key=key, status=Approval.Status.EXPIRED).first(),
        message="the approval to expire",
    )
    with pytest.raises(ApprovalRefused, match="decided already"):
        _decide(guarded["pete"], approval.pk, True)  # too late: nothing runs
    assert _runs(key) == 0
