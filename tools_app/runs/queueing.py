"""Putting a run on a Celery queue (by task name: the tasks module imports the services
that re-queue runs, so it cannot be imported from them)."""

from __future__ import annotations

from celery import current_app
from django.conf import settings

from tools_app.catalog.spec import ToolSpec

EXECUTE_RUN = "tools_app.tasks.execute_run"
LONG_QUEUE = "toolbay.long"
SHORT_QUEUE = "toolbay.short"


def queue_for(tool: ToolSpec) -> str:
    return LONG_QUEUE if tool.timeout_seconds > settings.TOOLBAY_LONG_CALL_SECONDS else SHORT_QUEUE


def enqueue(run_id: str, tool: ToolSpec | None) -> None:
    if tool is None:  # deleted since the run began: the worker records that it cannot run
        current_app.send_task(EXECUTE_RUN, args=[run_id], queue=SHORT_QUEUE)
        return
    # Celery's hard limit is only the backstop; the worker enforces timeout and grace itself.
    hard_limit = tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + 30
    current_app.send_task(EXECUTE_RUN, args=[run_id], queue=queue_for(tool), time_limit=hard_limit)
