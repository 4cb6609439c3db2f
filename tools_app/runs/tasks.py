"""Celery tasks: thin entry points onto the runs services and the worker (ids, not objects).

Task names stay ``tools_app.tasks.*``: messages already queued (and beat schedules) name
them, so they must survive the module's move.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from celery.signals import worker_init, worker_process_init, worker_process_shutdown
from django.db import connections
from django.utils import timezone

from audit.models import ConfirmationOutcome, Outcome
from mcp_platform import tracing
from tools_app.backends.results import error_result
from tools_app.catalog.checks import tool_timeout_problem
from tools_app.runs import store
from tools_app.runs.approvals import approvals_purge_expired
from tools_app.runs.confirmation import CONFIRMATION_KEY, unconfirmed_result
from tools_app.runs.context import ConfirmationRecord
from tools_app.runs.heartbeat import WorkerHeartbeat, beating
from tools_app.runs.models import ToolRun
from tools_app.runs.queueing import EXECUTE_RUN
from tools_app.runs.recovery import deadline_of, loss_verdict, lost_runs, recover_run
from tools_app.runs.selectors import stuck_runs, unconfirmed_runs
from tools_app.runs.services import finish_and_signal
from tools_app.runs.services import purge_expired_runs as purge
from tools_app.runs.worker import WorkerState, announcement, run_in_worker

log = logging.getLogger(__name__)


@worker_process_init.connect
def _in_pool_child(**_: Any) -> None:
    WorkerState.in_pool_child = True


@worker_init.connect
def _say_which_setting_to_raise(**_: Any) -> None:
    # migrate refuses such tools (tools_app.catalog.checks); a worker started anyway, or after
    # CELERY_VISIBILITY_TIMEOUT was lowered, says so at once instead of running calls twice later.
    problem = tool_timeout_problem()
    if problem:
        log.error("%s", problem)
    connections.close_all()  # read before the pool forks: no child may inherit this connection


@worker_process_shutdown.connect
def _export_spans(**_: Any) -> None:
    # A pool child ends without running atexit handlers: its last spans would be lost.
    tracing.flush()


async def _fail(run_id: str, text: str) -> None:
    await finish_and_signal(run_id, status=ToolRun.Status.FAILED, result=error_result(text), message=text)


@shared_task(name=EXECUTE_RUN, acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> None:
    if not tracing.ENABLED:
        _execute_run(run_id)
        return
    # The producer's trace context came in the message headers (queueing.enqueue).
    request = execute_run.request
    headers = {name: getattr(request, name, None) for name in ("traceparent", "tracestate")}
    queue = (request.delivery_info or {}).get("routing_key") or "celery"
    with tracing.consumer_span(
        f"{queue} process",
        headers,
        messaging__system="celery",
        toolbay__run__id=run_id,
    ):
        _execute_run(run_id)


def _execute_run(run_id: str) -> None:
    WorkerState.run(_take_and_run(run_id))


async def _take_and_run(run_id: str) -> None:
    """Read the run's live state (no database on the way: tools_app/runs/store.py), take it
    and run it."""
    run = await store.load(run_id)
    if run is None or run.is_terminal:
        return  # cancelled while queued, or a redelivery after the outcome was recorded
    if run.worker_id and beating([run.worker_id])[run.worker_id]:
        return  # a live worker runs it (this is a second delivery of a run queued again)
    tool = await store.spec_of(run)
    if tool is None:
        await _fail(run_id, f"Tool '{run.tool_name}' was deleted before the call could run.")
        return
    if run.attempts > 0:
        # Delivered again: the worker process that ran it died mid-call.
        verdict = loss_verdict(run, tool)
        if verdict is not None:
            await _fail(run_id, verdict)
            return
        log.warning("re-running idempotent call %s of %s after a worker died", run_id, tool.name)
    seen_worker, worker = run.worker_id, WorkerHeartbeat.ensure()
    run.attempts, run.worker_pid, run.worker_id, run.started_at = run.attempts + 1, os.getpid(), worker, timezone.now()
    # The call's stream names this worker before the run is recorded as ours (Redis runs
    # ``before`` first, in the same round trip): should we die in between, whoever follows
    # the stream still learns who took it (recovery.py).
    taken = await store.transition(
        run_id,
        {"worker_pid": run.worker_pid, "worker_id": worker, "started_at": run.started_at},
        statuses=ToolRun.ACTIVE,
        worker=seen_worker,
        count_attempt=True,
        before=announcement(run, deadline_of(run, tool)),
    )
    if not taken:
        return  # another worker took it between our read and now
    run.version = taken
    # Joins Celery's task id, the run and (with tracing on) the call's trace in the worker's log.
    log.info("running call %s of %s (attempt %d)", run_id, tool.name, run.attempts)
    await run_in_worker(run, tool)


@shared_task(name="tools_app.tasks.purge_expired_runs")
def purge_expired_runs() -> int:
    """Runs past their TTL, and operator approvals long over (``approvals_purge_expired``)."""
    return purge() + approvals_purge_expired()


@shared_task(name="tools_app.tasks.reap_stuck_runs")
def reap_stuck_runs() -> int:
    """Fail runs that outlived every limit (e.g. their worker machine vanished), and end
    tasks whose confirmation nobody gave within their tool's timeout."""
    return int(async_to_sync(_reap_stuck_runs)())


async def _reap_stuck_runs() -> int:
    reaped = 0
    for run in await stuck_runs():
        text = f"Tool '{run.tool_name}' did not finish: no worker completed it in time. It was not retried."
        if await finish_and_signal(run.id, status=ToolRun.Status.FAILED, result=error_result(text), message=text):
            reaped += 1
    for run in await unconfirmed_runs(CONFIRMATION_KEY):
        record = ConfirmationRecord(ConfirmationOutcome.TIMED_OUT)
        tool = await store.spec_of(run)
        timeout = tool.timeout_seconds if tool is not None else 0
        name = (tool.title if tool is not None else "") or run.tool_name
        result = unconfirmed_result(name, record, timeout)
        # A tool error, as when the worker ends the call: the 2026-07-28 task completes with it.
        if await finish_and_signal(
            run.id,
            status=ToolRun.Status.COMPLETED,
            result=result,
            message=result["content"][0]["text"],
            outcome=Outcome.NOT_CONFIRMED,
            confirmation=record.row_fields(),
        ):
            reaped += 1
    return reaped


@shared_task(name="tools_app.tasks.recover_lost_runs")
def recover_lost_runs() -> int:
    """Recover runs whose worker stopped beating or that are past their deadline (MCP tasks
    have no stream whose follower would notice; calls get a second pair of eyes)."""
    return int(async_to_sync(_recover_lost_runs)())


async def _recover_lost_runs() -> int:
    lost = await lost_runs()
    for run_id in lost:
        await recover_run(run_id)
    return len(lost)
