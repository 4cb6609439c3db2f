"""Putting a run on a Celery queue (by task name: the tasks module imports the services
that re-queue runs, so it cannot be imported from them)."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.conf import settings

from mcp_platform import tracing
from tools_app.catalog.spec import ToolSpec

EXECUTE_RUN = "tools_app.tasks.execute_run"
LONG_QUEUE = "toolbay.long"
SHORT_QUEUE = "toolbay.short"


def queue_for(tool: ToolSpec) -> str:
    return LONG_QUEUE if tool.timeout_seconds > settings.TOOLBAY_LONG_CALL_SECONDS else SHORT_QUEUE


def enqueue(run_id: str, tool: ToolSpec | None) -> None:
    queue = queue_for(tool) if tool is not None else SHORT_QUEUE
    # Celery's hard limit is only the backstop; the worker enforces timeout and grace itself.
    options: dict[str, Any] = (
        {"time_limit": tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + 30} if tool is not None else {}
    )
    options["ignore_result"] = True  # no result backend: the run's state is the result
    if not tracing.ENABLED:
        current_app.send_task(EXECUTE_RUN, args=[run_id], queue=queue, **options)
        return
    # The worker's consumer span is the child of this one (its traceparent in the message headers).
    with tracing.span(
        f"{queue} publish",
        kind=tracing.SpanKind.PRODUCER,
        attributes={"messaging.system": "celery", "messaging.destination.name": queue, "toolbay.run.id": run_id},
    ):
        current_app.send_task(EXECUTE_RUN, args=[run_id], queue=queue, headers=tracing.inject({}), **options)


async def queue(run_id: str, tool: ToolSpec | None) -> None:
    """``enqueue`` from async code: on the event loop's own thread, though Celery's producer
    blocks on its broker (an LPUSH to Redis). From a pool of threads, each thread first built
    its own producer and result backend, and they contended for kombu's locks (py-spy, 32
    sessions: half the publishing time)."""
    enqueue(run_id, tool)
