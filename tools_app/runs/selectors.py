"""Reads about runs: a caller's own runs and tasks, runs past every limit, the Task view."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from mcp_platform.mcp.jsonrpc import INTERNAL_ERROR
from mcp_platform.mcp.versions import MODERN
from tenants.principal import Principal
from tools_app.runs import store
from tools_app.runs.models import ToolRun


async def run_of(principal: Principal, run_id: Any, *, tasks_only: bool = True) -> ToolRun | None:
    """The caller's own run as it is now; None for missing, expired and other credentials'
    runs alike."""
    if not isinstance(run_id, str) or len(run_id) > 32:
        return None
    run = await store.load(run_id)
    return run if run is not None and _owned(principal, run, tasks_only, timezone.now()) else None


def _owned(principal: Principal, run: ToolRun, tasks_only: bool, now: datetime) -> bool:
    return (
        run.tenant_id == principal.tenant_id
        and run.subject == principal.subject
        and (run.is_task or not tasks_only)
        and (run.expires_at is None or run.expires_at >= now)
    )


def runs_of(principal: Principal, *, tasks_only: bool = True) -> QuerySet[ToolRun]:
    runs = ToolRun.objects.filter(tenant_id=principal.tenant_id, subject=principal.subject)
    if tasks_only:
        runs = runs.filter(is_task=True)
    return runs.exclude(expires_at__lt=timezone.now())


async def task_page(principal: Principal, offset: int, limit: int) -> list[ToolRun]:
    """The caller's tasks, newest first, from ``offset``: up to ``limit + 1`` of them (one more
    says there are more). Rows merged with the runs not written yet, each as it is now."""
    now = timezone.now()
    unwritten = await store.load_many(await store.unwritten_ids())
    fresh = [run for run in unwritten.values() if _owned(principal, run, True, now)]
    rows = runs_of(principal).exclude(pk__in=[run.id for run in fresh]).order_by("-created_at", "id")
    found = [run async for run in rows.only("id")[: offset + limit + 1]]
    runs = [*fresh, *(await store.load_many([run.id for run in found])).values()]
    runs.sort(key=lambda run: (-run.created_at.timestamp(), run.id))
    return runs[offset : offset + limit + 1]


async def active_runs() -> list[ToolRun]:
    """Every active run as it is now: the rows that say so and the runs not written yet."""
    ids = [run_id async for run_id in ToolRun.objects.filter(status__in=ToolRun.ACTIVE).values_list("pk", flat=True)]
    runs = await store.load_many([*ids, *await store.unwritten_ids()])
    return [run for run in runs.values() if not run.is_terminal]


async def stuck_runs() -> list[ToolRun]:
    """Active runs that outlived every limit since their last start: queue wait, timeout and
    grace. A 2026-07-28 task waiting for its client runs nowhere; its TTL ends it."""
    now = timezone.now()
    slack = settings.TOOLBAY_QUEUE_TIMEOUT_SECONDS + settings.MCP_CANCEL_GRACE_SECONDS + 30
    stuck = []
    for run in await active_runs():
        if run.status == ToolRun.Status.INPUT_REQUIRED and run.protocol_version in MODERN:
            continue  # parked
        tool = await store.spec_of(run)
        timeout = tool.timeout_seconds if tool is not None else 0
        if (run.started_at or run.created_at) + timedelta(seconds=timeout + slack) < now:
            stuck.append(run)
    return stuck


async def unconfirmed_runs(confirmation_key: str) -> list[ToolRun]:
    """2026-07-28 tasks parked on the confirmation their policy asks for (under
    ``confirmation_key``) whose tool's timeout has passed since they asked: the client holds
    the question, so no process waits to give up on it."""
    now = timezone.now()
    unconfirmed = []
    for run in await active_runs():
        parked = run.status == ToolRun.Status.INPUT_REQUIRED and run.protocol_version in MODERN
        if not parked or confirmation_key not in (run.input_requests or {}):
            continue
        tool = await store.spec_of(run)
        if run.updated_at + timedelta(seconds=tool.timeout_seconds if tool is not None else 0) < now:
            unconfirmed.append(run)
    return unconfirmed


def task_view(run: ToolRun) -> dict[str, Any]:
    """The MCP Task object of a run (2025-11-25): its status, not its result."""
    task: dict[str, Any] = {
        "taskId": run.id,
        "status": run.status,
        "createdAt": run.created_at.isoformat(),
        "lastUpdatedAt": run.updated_at.isoformat(),
        "ttl": run.ttl_ms,
        "pollInterval": settings.MCP_TASK_POLL_INTERVAL_MS,
    }
    if run.status_message:
        task["statusMessage"] = run.status_message
    return task


def detailed_task_view(run: ToolRun) -> dict[str, Any]:
    """The 2026-07-28 DetailedTask of a run (tasks extension): the task, plus what its status
    implies: the requests it waits on, its result (a tool error is a completed task whose
    result says isError), or the protocol error it failed with (never a result then)."""
    task: dict[str, Any] = {
        "taskId": run.id,
        "status": run.status,
        "createdAt": run.created_at.isoformat(),
        "lastUpdatedAt": run.updated_at.isoformat(),
        "ttlMs": run.ttl_ms,
        "pollIntervalMs": settings.MCP_TASK_POLL_INTERVAL_MS,
    }
    if run.status_message:
        task["statusMessage"] = run.status_message
    if run.status == ToolRun.Status.INPUT_REQUIRED:
        task["inputRequests"] = run.input_requests
    elif run.status == ToolRun.Status.COMPLETED:
        task["result"] = run.result or {"content": []}
    elif run.status == ToolRun.Status.FAILED:
        # Runs the platform gave up on (no worker in time, a worker that died) failed
        # without a JSON-RPC error of their own: their message is the error's.
        task["error"] = run.error or {"code": INTERNAL_ERROR, "message": run.status_message or "The task failed"}
    return task
