"""Reads about runs: a caller's own runs and tasks, runs past every limit, the Task view."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

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
    """Active runs that outlived every limit: queue wait, timeout and grace."""
    now = timezone.now()
    slack = settings.TOOLBAY_QUEUE_TIMEOUT_SECONDS + settings.MCP_CANCEL_GRACE_SECONDS + 30
    stuck = []
    for run in ToolRun.objects.filter(status__in=ToolRun.ACTIVE).select_related("tool"):
        timeout = run.tool.timeout_seconds if run.tool is not None else 0
        if run.created_at + timedelta(seconds=timeout + slack) < now:
            stuck.append(run)
    return stuck


def task_view(run: ToolRun) -> dict[str, Any]:
    """The MCP Task object of a run (2025-11-25)."""
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
