"""Runs whose worker died, or that outlived their deadline, end within seconds.

A worker's death is noticed by its heartbeat (``heartbeat.py``), not by the queue's
visibility timeout: whoever follows the call's stream checks every beat interval
(``mcp_platform.mcp.liveness``), and a periodic sweep does the same for MCP tasks, which
have no stream. A lost run of an idempotent tool is queued again (up to
``TOOLBAY_MAX_RETRIES``); any other is failed with a message saying why. A run whose worker
lives on past its deadline (timeout, grace and slack after it started) is failed as timed
out and its worker told to stop: the tool's own timeout holds on the web side too.
Every transition is conditional, so any number of followers may ask at once.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from audit.models import Outcome
from tools_app.backends.results import error_result
from tools_app.catalog.spec import ToolSpec
from tools_app.runs import store
from tools_app.runs.delivery import address_of, relay
from tools_app.runs.heartbeat import beating
from tools_app.runs.models import ToolRun
from tools_app.runs.queueing import queue
from tools_app.runs.selectors import active_runs
from tools_app.runs.services import finish_and_signal


def deadline_of(run: ToolRun, tool: ToolSpec) -> float:
    """Epoch seconds by which the run's current attempt must be over."""
    began = run.started_at or run.created_at
    grace, slack = settings.MCP_CANCEL_GRACE_SECONDS, settings.TOOLBAY_RUN_DEADLINE_SLACK_SECONDS
    return began.timestamp() + tool.timeout_seconds + grace + slack


def loss_verdict(run: ToolRun, tool: ToolSpec) -> str | None:
    """Why a run whose worker died must not run again; None: run it again."""
    if not tool.annotations.get("idempotentHint"):
        return (
            f"The worker running '{tool.name}' died before it finished. The call was not retried "
            "because the tool is not marked idempotent; it may have had partial effects."
        )
    if run.attempts > settings.TOOLBAY_MAX_RETRIES:
        return f"The worker running '{tool.name}' died {run.attempts} times; giving up."
    return None


async def _requeue(run: ToolRun, tool: ToolSpec) -> bool:
    """Take the run back from its dead worker and queue it; False if someone else did."""
    taken = await store.transition(run.id, {"worker_id": ""}, statuses=ToolRun.ACTIVE, worker=run.worker_id)
    if taken:
        await queue(run.id, tool)
    return bool(taken)


async def recover_run(run_id: str, worker: str = "") -> None:
    """``worker``: the worker the call's stream names (it took the run's message); it may
    have died before it recorded the run as its own, in which case nothing ran yet."""
    run = await store.load(run_id)
    tool = await store.spec_of(run) if run is not None else None
    if run is None or run.is_terminal or tool is None:
        return  # ended, or its tool is gone (the worker says so)
    suspect = run.worker_id or worker
    if not suspect:
        return  # queued: nobody runs it yet
    alive = (await sync_to_async(beating)([suspect]))[suspect]
    if alive:
        if run.worker_id and timezone.now().timestamp() > deadline_of(run, tool):
            await _time_out(run, tool)
        return
    if not run.worker_id:
        # Its worker died between taking the message and starting the run: nothing ran, so
        # it runs again whatever the tool (the message itself would come back only after
        # the visibility timeout).
        await relay().run_producer(address_of(run), run.id)
        await queue(run.id, tool)
        return
    verdict = loss_verdict(run, tool)
    if verdict is not None:
        await finish_and_signal(run.id, status=ToolRun.Status.FAILED, result=error_result(verdict), message=verdict)
    elif await _requeue(run, tool):
        await relay().run_producer(address_of(run), run.id)  # queued again: no worker to watch yet


async def _time_out(run: ToolRun, tool: ToolSpec) -> None:
    text = f"Tool '{tool.name}' timed out after {tool.timeout_seconds:g} seconds (its worker did not stop it)."
    ended = await finish_and_signal(
        run.id, status=ToolRun.Status.FAILED, result=error_result(text), message=text, outcome=Outcome.TIMED_OUT
    )
    if ended:
        await relay().cancel_runner(run.id)  # the worker stops the handler, or its process


async def lost_runs() -> list[str]:
    """Active runs (background calls and tasks) whose worker stopped beating or that are
    past their deadline: what the periodic sweep recovers."""
    runs = [run for run in await active_runs() if run.worker_id]
    alive = await sync_to_async(beating)(sorted({run.worker_id for run in runs}))
    now = timezone.now()
    lost = []
    for run in runs:
        tool = await store.spec_of(run)
        overdue = tool is not None and now.timestamp() > deadline_of(run, tool)
        if overdue or not alive[run.worker_id]:
            lost.append(run.id)
    return lost
