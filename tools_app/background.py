"""The ASGI side of background calls and MCP tasks: start a run, relay its stream.

A worker appends the call's progress, requests and final response to the call's event
log; the POST that started it relays that log to the client. The log is also the replay
buffer, so a client that reconnects elsewhere, or an ASGI process that dies, loses
nothing. The POST gives up only after the tool's timeout plus the queue allowance, and
then records the call as failed so it can never stay "working".
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from mcp_platform.mcp.calls import CallLink, Relayed
from mcp_platform.mcp.events import EventStore
from mcp_platform.redis_clients import async_redis
from tenants.principal import Principal
from tools_app.models import ToolRun
from tools_app.results import error_result
from tools_app.runs import cancel_run, finish_and_signal, run_create, task_view
from tools_app.spec import ToolSpec

LONG_QUEUE = "toolbay.long"
SHORT_QUEUE = "toolbay.short"


def queue_for(tool: ToolSpec) -> str:
    return LONG_QUEUE if tool.timeout_seconds > settings.TOOLBAY_LONG_CALL_SECONDS else SHORT_QUEUE


def _enqueue(run_id: str, tool: ToolSpec) -> None:
    from tools_app.tasks import execute_run

    # Celery's hard limit is only the backstop; the worker enforces timeout and grace itself.
    hard_limit = tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + 30
    execute_run.apply_async(args=[run_id], queue=queue_for(tool), time_limit=hard_limit)


def run_start(*, tool: ToolSpec, **fields: Any) -> ToolRun:
    """Create the run and queue it once the row is committed (a worker must find it)."""
    with transaction.atomic():
        run = run_create(tool=tool, **fields)
        transaction.on_commit(functools.partial(_enqueue, run.id, tool))
    return run


async def call_in_background(
    principal: Principal, tool: ToolSpec, arguments: dict[str, Any], link: CallLink
) -> Relayed:
    after = await link.open_stream()
    run = await sync_to_async(run_start)(
        tool=tool,
        principal=principal,
        arguments=arguments,
        session_id=link.session_id,
        stream_id=link.stream_id,
        request_id=link.request_id,
        progress_token=link.progress_token,
        client_capabilities=link.client_capabilities,
        log_level=link.log_level,
        is_task=False,
    )
    link.on_cancel = functools.partial(cancel_run, run.id)
    events = EventStore(async_redis(), ttl_seconds=settings.MCP_EVENT_TTL_SECONDS)
    patience = tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + settings.TOOLBAY_QUEUE_TIMEOUT_SECONDS
    try:
        async with asyncio.timeout(patience):
            return await _relay(events, link, after)
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
            return await _relay(events, link, after)


async def _relay(events: EventStore, link: CallLink, after: str) -> Relayed:
    async for event in events.follow(link.session_id, link.stream_id, after):
        if event.final:
            return Relayed(event)
        await link.forward(event)
    raise AssertionError("event log ended without a final event")  # follow() only returns after one


async def create_task(
    principal: Principal, tool: ToolSpec, arguments: dict[str, Any], link: CallLink, ttl_ms: int | None
) -> dict[str, Any]:
    from tools_app.execution import argument_problem

    ttl = min(ttl_ms if ttl_ms is not None else settings.MCP_TASK_DEFAULT_TTL_MS, settings.MCP_TASK_MAX_TTL_MS)
    problem = argument_problem(tool, arguments)
    fields: dict[str, Any] = dict(
        principal=principal,
        arguments=arguments,
        session_id=link.session_id,
        stream_id=link.stream_id,
        request_id=link.request_id,
        progress_token=link.progress_token,
        client_capabilities=link.client_capabilities,
        log_level=link.log_level,
        is_task=True,
        ttl_ms=ttl,
    )
    if problem is not None:
        run = await sync_to_async(run_create)(tool=tool, **fields)
        await finish_and_signal(
            run.id,
            status=ToolRun.Status.FAILED,
            result=problem,
            message="Invalid arguments",
            outcome="invalid_arguments",
        )
    else:
        run = await sync_to_async(run_start)(tool=tool, **fields)
    await run.arefresh_from_db()
    return {"task": task_view(run)}
