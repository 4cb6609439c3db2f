"""Handing a call to a Celery worker: a background call (relayed on its POST) or an MCP task.

A worker appends the call's progress, requests and final response to the call's event log
(through the engine's relay); the POST that started it relays that log to the client. The
log is also the replay buffer, so a client that reconnects elsewhere, or an ASGI process
that dies, loses nothing. The POST gives up only after the tool's timeout plus the queue
allowance, and then records the call as failed so it can never stay "working".
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from django.conf import settings

from audit.models import Outcome
from mcp_platform.mcp.calls import CallLink, Relayed
from tenants.principal import Principal
from tools_app.backends.results import error_result
from tools_app.catalog.spec import ToolSpec
from tools_app.runs import queueing, store
from tools_app.runs.delivery import address_of, relay
from tools_app.runs.execution import argument_problem
from tools_app.runs.models import ToolRun, new_run_id
from tools_app.runs.selectors import task_view
from tools_app.runs.services import cancel_run, finish_and_signal, run_answer, run_create


async def run_start(*, tool: ToolSpec, run_id: str | None = None, **fields: Any) -> ToolRun:
    """Accept the run (in Redis: a worker finds it there) and queue it, in one transaction."""
    run_id = run_id or new_run_id()
    async with queueing.accepting(run_id, tool) as also:
        return await run_create(tool=tool, run_id=run_id, also=also, **fields)


def _run_fields(principal: Principal, arguments: dict[str, Any], link: CallLink, confirmation: str) -> dict[str, Any]:
    """Where the run's messages go, what the worker's context knows of the client and the
    confirmation policy that applies to this caller."""
    return dict(
        principal=principal,
        arguments=arguments,
        confirmation=confirmation,
        session_id=link.session_id,
        stream_id=link.stream_id,
        request_id=link.request_id,
        progress_token=link.progress_token,
        client_capabilities=link.client_capabilities,
        log_level=link.log_level,
        protocol_version=link.protocol_version,
        input_responses=link.input_responses(),
    )


async def call_in_background(
    principal: Principal, tool: ToolSpec, arguments: dict[str, Any], link: CallLink, confirmation: str
) -> Relayed:
    run_id = new_run_id()
    after = await link.open_stream(run_id)
    fields = _run_fields(principal, arguments, link, confirmation)
    run = await run_start(tool=tool, is_task=False, run_id=run_id, **fields)
    link.on_cancel = functools.partial(cancel_run, run.id)
    patience = tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + settings.TOOLBAY_QUEUE_TIMEOUT_SECONDS
    try:
        async with asyncio.timeout(patience):
            return await link.relay(after)
    except TimeoutError:
        await finish_and_signal(
            run.id,
            status=ToolRun.Status.FAILED,
            result=error_result(
                f"Tool '{tool.name}' did not finish: no worker completed it within {patience:g} "
                "seconds. It was not retried."
            ),
            message="No worker completed the call in time",
        )
        async with asyncio.timeout(10):  # the final event is in the log now, from us or the worker
            return await link.relay(after)


async def create_task(
    principal: Principal,
    tool: ToolSpec,
    arguments: dict[str, Any],
    link: CallLink,
    ttl_ms: int | None,
    confirmation: str,
) -> dict[str, Any]:
    """Start a legacy (2025-11-25) MCP task; returns its CreateTaskResult."""
    ttl = min(ttl_ms if ttl_ms is not None else settings.MCP_TASK_DEFAULT_TTL_MS, settings.MCP_TASK_MAX_TTL_MS)
    fields = {**_run_fields(principal, arguments, link, confirmation), "is_task": True, "ttl_ms": ttl}
    problem = argument_problem(tool, arguments)
    if problem is not None:
        run = await run_create(tool=tool, **fields)
        await finish_and_signal(
            run.id,
            status=ToolRun.Status.FAILED,
            result=problem,
            message="Invalid arguments",
            outcome=Outcome.INVALID_ARGUMENTS,
        )
    else:
        run = await run_start(tool=tool, **fields)
    now = await store.load(run.id)
    return {"task": task_view(now or run)}


async def start_task(
    principal: Principal, tool: ToolSpec, arguments: dict[str, Any], link: CallLink, confirmation: str
) -> dict[str, Any]:
    """Start a 2026-07-28 task (tasks extension) for already-validated arguments; returns its
    CreateTaskResult once the run is committed, so a tasks/get right after finds it.

    The task has no session and no stream: whatever the handler gathered before it became
    a task (multi-round answers) travels with it, and its client polls tasks/get.
    """
    fields = {
        **_run_fields(principal, arguments, link, confirmation),
        "session_id": "",
        "stream_id": "",
        "request_id": None,
        "progress_token": None,
        "is_task": True,
        "ttl_ms": settings.MCP_TASK_DEFAULT_TTL_MS,
    }
    run = await run_start(tool=tool, **fields)
    return {
        "resultType": "task",
        "taskId": run.id,
        "status": run.status,
        "createdAt": run.created_at.isoformat(),
        "lastUpdatedAt": run.updated_at.isoformat(),
        "ttlMs": run.ttl_ms,
        "pollIntervalMs": settings.MCP_TASK_POLL_INTERVAL_MS,
    }


async def answer_task(run: ToolRun, responses: dict[str, Any]) -> None:
    """A client's answers to a parked 2026-07-28 task: once every request it waits on has
    one, the task runs again (from the start, with all its answers) on a worker. Listen
    streams following the task hear of it."""
    if await run_answer(run.id, responses):
        await queueing.queue(run.id, await store.spec_of(run))
    await relay().task_status(address_of(run), task_view(await store.load(run.id) or run))
