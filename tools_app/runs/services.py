"""Writes about runs (Celery-executed calls and MCP tasks): their durable state and outcome.

Transitions are conditional updates, so a terminal state never changes and exactly one
party (worker, canceller, reaper) gets to record a run's outcome, send its response
(through the engine's relay) and write its invocation row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from audit.journal import invocation_row, journal
from audit.models import Outcome
from mcp_platform.mcp.text import storable
from mcp_platform.redis_batch import Command
from tenants.models import ApiKey
from tenants.principal import Principal
from tools_app.catalog.spec import ToolSpec
from tools_app.runs import store
from tools_app.runs.delivery import address_of, relay
from tools_app.runs.models import ToolRun
from tools_app.runs.selectors import task_view


async def run_create(
    *,
    principal: Principal,
    tool: ToolSpec,
    arguments: dict[str, Any],
    session_id: str,
    stream_id: str,
    request_id: Any,
    progress_token: Any,
    client_capabilities: dict[str, Any],
    log_level: str,
    is_task: bool,
    confirmation: str,
    protocol_version: str = "",
    input_responses: dict[str, Any] | None = None,
    ttl_ms: int | None = None,
    run_id: str | None = None,
    also: Sequence[tuple[Any, ...]] = (),
) -> ToolRun:
    """Accept a run: in Redis before this returns (``store``), its row written behind;
    ``also``: Redis commands of the same transaction (the message that queues it)."""
    now = timezone.now()
    expires_at = now + timedelta(milliseconds=ttl_ms) if ttl_ms is not None else None
    # What the client sent is stored as the database can hold it (NUL escaped; see text.py).
    arguments, request_id, progress_token, client_capabilities, input_responses = storable(
        [arguments, request_id, progress_token, client_capabilities, input_responses or {}]
    )
    run = ToolRun(
        **({"id": run_id} if run_id is not None else {}),
        tenant_id=principal.tenant_id,
        subject=principal.subject,
        credential_label=principal.label,
        oauth_subject=principal.oauth_subject,
        oauth_client=principal.oauth_client,
        oauth_issuer=principal.oauth_issuer[:500],
        grant_id=principal.grant_id[:64],
        tool_id=tool.id,
        tool_name=tool.name,
        tool_version=tool.version,
        arguments=arguments,
        is_task=is_task,
        session_id=session_id,
        stream_id=stream_id,
        request_id=request_id,
        progress_token=progress_token,
        client_capabilities=client_capabilities,
        confirmation=confirmation,
        log_level=log_level,
        protocol_version=protocol_version,
        input_responses=input_responses,
        ttl_ms=ttl_ms,
        expires_at=expires_at,
        created_at=now,
        updated_at=now,
    )
    run.spec = tool
    await store.create(run, tool, also)
    return run


async def run_finish(
    run_id: str,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str = "",
    then: Sequence[Command] = (),
) -> bool:
    """Record a terminal outcome; False when the run already had one. ``then``: commands
    that run with the change, only when it is made (``store.transition``)."""
    assert status not in ToolRun.ACTIVE
    changes = {
        "status": status,
        "result": storable(result),
        "error": storable(error),
        "status_message": storable(message),
        "finished_at": timezone.now(),
    }
    return bool(await store.transition(run_id, changes, statuses=ToolRun.ACTIVE, then=then))


async def run_set_active_status(run_id: str, status: str) -> bool:
    """working ↔ input_required, only while the run is active."""
    assert status in ToolRun.ACTIVE
    return bool(await store.transition(run_id, {"status": status}, statuses=ToolRun.ACTIVE))


async def run_park(run_id: str, requests: dict[str, Any]) -> bool:
    """A 2026-07-28 task waits for its client: input_required with the requests still
    unanswered. Its worker lets go of it; ``run_answer`` resumes it."""
    # No worker holds it any more (its heartbeat no longer speaks for the run).
    changes = {"status": ToolRun.Status.INPUT_REQUIRED, "input_requests": requests, "worker_id": ""}
    return bool(await store.transition(run_id, changes, statuses=[ToolRun.Status.WORKING]))


async def run_answer(run_id: str, responses: dict[str, Any]) -> bool:
    """Take the client's answers to a parked task's requests (answers to keys it did not ask
    are ignored). Returns True when nothing is pending any more and the run is working again,
    to be queued now."""
    while True:  # the answers apply to the run as read, or the run is read again
        run = await store.load(run_id)
        if run is None or run.status != ToolRun.Status.INPUT_REQUIRED or not run.input_requests:
            return False
        answered = {key: value for key, value in storable(responses).items() if key in run.input_requests}
        pending = {key: value for key, value in run.input_requests.items() if key not in answered}
        changes: dict[str, Any] = {"input_responses": {**run.input_responses, **answered}, "input_requests": pending}
        if not pending:
            # The next execution starts cleanly: its attempts count worker deaths afresh.
            changes.update(status=ToolRun.Status.WORKING, attempts=0, worker_id="")
        if await store.transition(run_id, changes, statuses=[ToolRun.Status.INPUT_REQUIRED], version=run.version):
            return not pending


def purge_expired_runs() -> int:
    """Rows past their TTL (their live state in Redis expires by itself, and goes with them)."""
    expired = list(ToolRun.objects.filter(expires_at__lt=timezone.now()).values_list("pk", flat=True))
    deleted, _ = ToolRun.objects.filter(pk__in=expired).delete()
    async_to_sync(store.forget)(expired)
    return deleted


async def finish_and_signal(
    run_id: str,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str = "",
    run: ToolRun | None = None,
    outcome: Outcome | None = None,
    confirmation: dict[str, Any] | None = None,
    connection: str = "",
) -> bool:
    """Record the outcome and, if this caller recorded it, deliver it and log the invocation.
    Returns whether it did.

    Pass ``run`` when the caller holds the row already; it saves reading it again.
    ``outcome`` is the invocation log's finer word for it (timed_out, error, …); by default
    the status says it; ``confirmation`` what became of the confirmation the call needed
    (the invocation row's confirmation fields).
    """
    if run is not None and not run.is_task:
        return await _finish_call(run, status, result, error, message, outcome, confirmation, connection)
    if not await run_finish(run_id, status=status, result=result, error=error, message=message):
        return False
    if run is None:
        run = await store.load(run_id)
        assert run is not None  # it just ended: its live state is kept a while
    else:
        _ended(run, status, result, error, message)
    await deliver_outcome(run)
    await record_run(run, outcome or Outcome(status), message, confirmation or {}, connection)
    return True


async def _finish_call(
    run: ToolRun,
    status: str,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    message: str,
    outcome: Outcome | None,
    confirmation: dict[str, Any] | None,
    connection: str,
) -> bool:
    """``finish_and_signal`` for a plain call whose run the caller holds (its worker): the
    call's response and its invocation row are appended by the script that records the
    outcome, only when it does. One round trip instead of three, and a worker that dies
    right after recording the outcome cannot leave the call without its response."""
    row = await invocation_of(run, outcome or Outcome(status), message, confirmation or {}, connection)
    response = relay().respond_commands(address_of(run), **_response(status, result, error))
    then = [*response, *journal.always_commands(row)]
    if not await run_finish(run.id, status=status, result=result, error=error, message=message, then=then):
        return False
    journal.counted(row)
    _ended(run, status, result, error, message)
    return True


async def record_run(
    run: ToolRun,
    outcome: Outcome,
    message: str = "",
    confirmation: dict[str, Any] | None = None,
    connection: str = "",
) -> None:
    """The invocation row of a background run or MCP task, once it ended. Its call id is the
    run's, so the run is recorded once however often its outcome is delivered."""
    await journal.append_always(await invocation_of(run, outcome, message, confirmation, connection))


async def invocation_of(
    run: ToolRun,
    outcome: Outcome,
    message: str = "",
    confirmation: dict[str, Any] | None = None,
    connection: str = "",
) -> dict[str, Any]:
    """The invocation row of a run that ends now (``record_run``)."""
    key_id = int(run.subject.rsplit(":", 1)[1]) if ":key:" in run.subject else None
    label = run.credential_label
    if not label:  # a run started before runs kept their caller's label
        key = await ApiKey.objects.filter(pk=key_id).only("name", "prefix").afirst() if key_id is not None else None
        label = f"{key.name} ({key.prefix})" if key is not None else "anonymous"
    tool = await store.spec_of(run)
    began = run.started_at or run.created_at
    finished = timezone.now()
    return invocation_row(
        call_id=f"run-{run.id}",
        tenant_id=run.tenant_id,
        key_id=key_id,
        key_label=label,
        oauth_subject=run.oauth_subject,
        oauth_client=run.oauth_client,
        session_id=run.session_id,
        protocol_version=run.protocol_version,
        tool_id=run.tool_id,
        tool_name=run.tool_name,
        tool_version=run.tool_version,
        arguments=run.arguments,
        input_schema=tool.input_schema if tool is not None else None,
        outcome=outcome,
        error_message=message,
        started_at=run.created_at.timestamp(),
        finished_at=finished.timestamp(),
        duration_ms=round((finished - began).total_seconds() * 1000, 3),
        run_id=run.id,
        is_task=run.is_task,
        connection=connection,
        **(confirmation or {}),
    )


async def deliver_outcome(run: ToolRun) -> None:
    """After a terminal transition: the response (a plain call) or a status notification and
    the wake-up of ``tasks/result`` (a task). A cancelled call gets no response."""
    channel, address = relay(), address_of(run)
    if run.is_task:
        await channel.task_status(address, task_view(run))
        await channel.task_done(run.id, run.status)
    else:
        await channel.respond(address, **_response(run.status, run.result, run.error))


def _response(status: str, result: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    """A plain call's response (``CallRelay.respond``'s arguments): its error, its result, or
    none at all when it was cancelled."""
    if status == ToolRun.Status.CANCELLED:
        return {}
    if error is not None:
        return {"error": error}
    return {"result": result or {"content": []}}


def _ended(run: ToolRun, status: str, result: Any, error: Any, message: str) -> None:
    """The held ``run`` as the outcome just recorded left it."""
    run.status, run.result, run.error, run.status_message = status, result, error, message
    run.updated_at = run.finished_at = timezone.now()


async def cancel_run(run_id: str, reason: str = "Cancelled by the client") -> bool:
    """Cancel an active run: record it, end its stream without a response, tell the worker."""
    cancelled = await finish_and_signal(run_id, status=ToolRun.Status.CANCELLED, message=reason)
    if cancelled:
        await relay().cancel_runner(run_id)
    return cancelled
