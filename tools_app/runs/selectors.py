"""Reads about runs: a caller's own runs and tasks, runs past every limit, the Task view."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from mcp_platform.mcp.jsonrpc import INTERNAL_ERROR
from mcp_platform.mcp.versions import MODERN
from tenants.principal import Principal
from tools_app.runs.models import ToolRun


def run_of(principal: Principal, run_id: Any, *, tasks_only: bool = True) -> ToolRun | None:
    """The caller's own run; None for missing, expired and other credentials' runs alike."""
    if not isinstance(run_id, str) or len(run_id) > 32:
        return None
    return runs_of(principal, tasks_only=tasks_only).filter(pk=run_id).first()


def runs_of(principal: Principal, *, tasks_only: bool = True) -> QuerySet[ToolRun]:
    runs = ToolRun.objects.filter(tenant_id=principal.tenant_id, subject=principal.subject)
    if tasks_only:
        runs = runs.filter(is_task=True)
    return runs.exclude(expires_at__lt=timezone.now())


def stuck_runs() -> list[ToolRun]:
    """Active runs that outlived every limit since their last start: queue wait, timeout and
    grace. A 2026-07-28 task waiting for its client runs nowhere; its TTL ends it."""
    now = timezone.now()
    slack = settings.TOOLBAY_QUEUE_TIMEOUT_SECONDS + settings.MCP_CANCEL_GRACE_SECONDS + 30
    parked = Q(status=ToolRun.Status.INPUT_REQUIRED, protocol_version__in=MODERN)
    stuck = []
    for run in ToolRun.objects.filter(status__in=ToolRun.ACTIVE).exclude(parked).select_related("tool"):
        timeout = run.tool.timeout_seconds if run.tool is not None else 0
        if (run.started_at or run.created_at) + timedelta(seconds=timeout + slack) < now:
            stuck.append(run)
    return stuck


def unconfirmed_runs(confirmation_key: str) -> list[ToolRun]:
    """2026-07-28 tasks parked on the confirmation their policy asks for (under
    ``confirmation_key``) whose tool's timeout has passed since they asked: the client holds
    the question, so no process waits to give up on it."""
    now = timezone.now()
    parked = ToolRun.objects.filter(
        status=ToolRun.Status.INPUT_REQUIRED, protocol_version__in=MODERN, input_requests__has_key=confirmation_key
    )
    return [
        run
        for run in parked.select_related("tool")
        if run.updated_at + timedelta(seconds=run.tool.timeout_seconds if run.tool is not None else 0) < now
    ]


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
