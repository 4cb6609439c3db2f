"""Confirmation before consequential calls, with the official SDK client against live servers.

Every outcome (approve, deny, cancel, no answer in time, a client that cannot ask) on both
revisions (legacy handshake 2025-11-25, and 2026-07-28 in auto mode: multi-round, and the
tasks extension), for an inline tool and one that runs on a Celery worker. The tools'
backend (``testing.record_run``) counts every run in Redis: a refused call must leave none.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import pytest
import redis
from django.conf import settings
from django.db import connection
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult

from audit.models import ConfirmationOutcome, Invocation, Outcome
from tenants.models import Tenant
from tests.mcp.sdk_modern import TasksExtension
from tests.poll import wait_for
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import access_rule_grant_pattern
from tools_app.runs.models import ToolRun
from tools_app.runs.tasks import reap_stuck_runs

pytestmark = pytest.mark.live

SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "password": {"type": "string", "x-sensitive": True}},
    "required": ["key"],
}
TOOLS: dict[str, dict[str, Any]] = {
    # No annotations: the spec's defaults make it destructive, so the default policy asks.
    "wipe_inline": {"title": "Wipe the archive", "timeout_seconds": 3},
    "wipe_background": {
        "title": "Wipe the archive (background)",
        "execution_mode": "background",
        "task_support": "optional",
        "timeout_seconds": 6,
    },
    "peek_inline": {"title": "Peek", "read_only_hint": True},
}
DESCRIPTION = "Deletes every file of the archive."
WIPES = ["wipe_inline", "wipe_background"]


@pytest.fixture(scope="module")
def confirm_tools(live_world: Any, django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        tools = []
        for name, fields in TOOLS.items():
            tool = Tool(
                name=name,
                description=DESCRIPTION,
                input_schema=SCHEMA,
                backend_config={"handler": "testing.record_run"},
                tags=["confirm"],
                **fields,
            )
            tool.full_clean()
            tool.save()
            tools.append(tool)
        rule = access_rule_grant_pattern(tenant=Tenant.objects.get(slug="live-alpha"), pattern="tag:confirm")
    yield
    with django_db_blocker.unblock():
        AccessRule.objects.filter(pk=rule.pk).delete()
        Tool.objects.filter(pk__in=[tool.pk for tool in tools]).delete()


def _runs(key: str) -> int:
    return int(redis.Redis.from_url(settings.REDIS_URL).llen(f"test:runs:{key}"))


@contextlib.asynccontextmanager
async def _client(server: Any, key: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(server.endpoint("live-alpha"), http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            yield client


def _answering(answer: ElicitResult, asked: list[Any]) -> Any:
    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return answer

    return elicit


APPROVE = ElicitResult(action="accept", content={"decision": "approve"})
DENY = ElicitResult(action="accept", content={"decision": "deny"})
DECLINE = ElicitResult(action="decline")
CANCEL = ElicitResult(action="cancel")


def _call(server: Any, live_world: Any, mode: str, tool: str, key: str, **options: Any) -> CallToolResult:
    async def scenario() -> CallToolResult:
        async with _client(server, live_world.keys["alpha"], mode, **options) as client:
            return await client.call_tool(tool, {"key": key, "password": "hunter2"})

    return asyncio.run(scenario())


def _row(key: str, *confirmations: str) -> Invocation:
    rows = Invocation.objects.filter(arguments__key=key, confirmation__in=confirmations)
    return wait_for(lambda: rows.order_by("-finished_at").first(), message=f"the row of {key}: {confirmations}")


def _check_form(asked: list[Any], title: str) -> None:
    (params,) = asked
    assert f"“{title}”" in params.message and DESCRIPTION in params.message
    assert "[redacted]" in params.message and "hunter2" not in params.message
    decision = params.requested_schema["properties"]["decision"]
    assert [option["const"] for option in decision["oneOf"]] == ["approve", "deny"]


MODES = ["legacy", "auto"]  # auto discovers 2026-07-28


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", WIPES)
def test_approved_calls_run_once(server, live_world, live_workers, confirm_tools, orm, mode, tool):
    key, asked = uuid.uuid4().hex, []
    result = _call(server, live_world, mode, tool, key, elicitation_callback=_answering(APPROVE, asked))
    assert result.is_error is False
    assert result.content[0].text == f"ran {key}"
    _check_form(asked, TOOLS[tool]["title"])
    assert _runs(key) == 1
    row = _row(key, ConfirmationOutcome.GRANTED)
    assert (row.outcome, row.confirmed_by) == (Outcome.COMPLETED, "the client's user")
    assert row.confirmed_at is not None and row.arguments["password"] == "[redacted]"
    if mode == "auto" and tool == "wipe_inline":  # the round that asked is in the log too
        _row(key, ConfirmationOutcome.ASKED)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", WIPES)
@pytest.mark.parametrize(
    ("answer", "outcome", "says"),
    [
        (DENY, ConfirmationOutcome.DECLINED, "the user declined"),
        (DECLINE, ConfirmationOutcome.DECLINED, "the user declined"),
        (CANCEL, ConfirmationOutcome.CANCELLED, "dismissed the confirmation"),
    ],
    ids=["deny", "decline", "cancel"],
)
def test_refused_calls_never_run(
    server, live_world, live_workers, confirm_tools, orm, mode, tool, answer, outcome, says
):
    key, asked = uuid.uuid4().hex, []
    result = _call(server, live_world, mode, tool, key, elicitation_callback=_answering(answer, asked))
    assert result.is_error is True
    assert says in result.content[0].text.lower() and "did not run" in result.content[0].text
    assert len(asked) == 1
    row = _row(key, outcome)
    assert row.outcome == Outcome.NOT_CONFIRMED and row.confirmed_by == "the client's user"
    assert _runs(key) == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tool", WIPES)
def test_a_client_without_elicitation_is_refused(server, live_world, live_workers, confirm_tools, orm, mode, tool):
    key = uuid.uuid4().hex
    result = _call(server, live_world, mode, tool, key)  # no elicitation callback: no capability
    assert result.is_error is True
    assert "cannot show" in result.content[0].text
    row = _row(key, ConfirmationOutcome.REFUSED)
    assert row.outcome == Outcome.NOT_CONFIRMED
    assert _runs(key) == 0


@pytest.mark.parametrize("tool", WIPES)
def test_no_answer_within_the_timeout_ends_the_call(server, live_world, live_workers, confirm_tools, orm, tool):
    """2025-11-25: the server waits for the answer on the call's stream, up to the tool's
    timeout. (On 2026-07-28 the client holds the question: there is no server-side wait.)"""
    key = uuid.uuid4().hex

    async def never(context: Any, params: Any) -> ElicitResult:
        await anyio.sleep(TOOLS[tool]["timeout_seconds"] + 10)  # the user walked away (behaviour under test)
        return APPROVE

    result = _call(server, live_world, "legacy", tool, key, elicitation_callback=never)
    assert result.is_error is True
    assert f"within {TOOLS[tool]['timeout_seconds']:g} seconds" in result.content[0].text
    row = _row(key, ConfirmationOutcome.TIMED_OUT)
    assert row.outcome == Outcome.NOT_CONFIRMED
    assert _runs(key) == 0


@pytest.mark.parametrize(("answer", "ran"), [(APPROVE, 1), (DENY, 0)], ids=["approve", "deny"])
def test_a_task_asks_through_tasks_update(server, live_world, live_workers, confirm_tools, orm, answer, ran):
    """2026-07-28 with the tasks extension: the background call is a task whose inputRequests
    carry the confirmation; the worker runs the backend only once it was approved."""
    key, asked = uuid.uuid4().hex, []

    async def respond(method: str, params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return answer.model_dump(exclude_none=True)

    tasks = TasksExtension(respond)
    # The callback declares the elicitation capability; the task's questions go to ``respond``.
    declares = _answering(answer, [])
    result = _call(
        server, live_world, "auto", "wipe_background", key, extensions=[tasks], elicitation_callback=declares
    )
    assert len(tasks.created) == 1 and "input_required" in [state.status for state in tasks.seen]
    assert "Wipe the archive (background)" in asked[0]["message"]
    assert result.is_error is (ran == 0)
    assert _runs(key) == ran
    row = _row(key, ConfirmationOutcome.GRANTED if ran else ConfirmationOutcome.DECLINED)
    assert row.is_task is True


@pytest.mark.parametrize("mode", MODES)
def test_read_only_tools_run_without_asking(server, live_world, confirm_tools, orm, mode):
    key, asked = uuid.uuid4().hex, []
    result = _call(server, live_world, mode, "peek_inline", key, elicitation_callback=_answering(DENY, asked))
    assert result.is_error is False and asked == []
    assert _runs(key) == 1


def test_a_task_nobody_confirms_ends_after_the_timeout(server, live_world, live_workers, confirm_tools, orm):
    """2026-07-28 with the tasks extension: the task waits for its confirmation holding no
    worker; once the tool's timeout passed, the periodic reaper ends it unconfirmed."""
    key, tasks = uuid.uuid4().hex, TasksExtension(timeout=40)  # follows the task, never answers

    def reap() -> int:
        try:
            parked = ToolRun.objects.filter(arguments__key=key, status=ToolRun.Status.INPUT_REQUIRED)
            wait_for(lambda: parked.exists(), message="the task to wait for its confirmation")
            assert reap_stuck_runs() == 0  # not before the timeout
            # The reaper runs every 30 s in production; here it is called until the 6 s have passed.
            return wait_for(reap_stuck_runs, timeout=20, message="the reaper to end the unconfirmed task")
        finally:
            connection.close()  # this thread's: the test database cannot be dropped while it is open

    async def scenario() -> CallToolResult:
        async with _client(
            server, live_world.keys["alpha"], "auto", extensions=[tasks], elicitation_callback=_answering(APPROVE, [])
        ) as client:
            call = asyncio.ensure_future(client.call_tool("wipe_background", {"key": key}))
            assert await asyncio.to_thread(reap) == 1
            return await call

    result = asyncio.run(scenario())
    assert result.is_error is True and "within 6 seconds" in result.content[0].text
    row = _row(key, ConfirmationOutcome.TIMED_OUT)
    assert (row.outcome, row.is_task) == (Outcome.NOT_CONFIRMED, True)
    assert _runs(key) == 0
