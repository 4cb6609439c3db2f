"""Background runs (Celery-executed calls and MCP tasks): their durable state and signals.

Transitions are conditional updates, so a terminal state never changes and exactly one
party (worker, canceller, reaper) gets to record a run's outcome and send its response.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from audit.recorder import record_run
from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.events import EventStore
from mcp_platform.redis_clients import async_redis
from tenants.principal import Principal
from tools_app.models import ToolRun
from tools_app.spec import ToolSpec

STANDALONE_STREAM = "get"
RELATED_TASK = "io.modelcontextprotocol/related-task"


def run_create(
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
    ttl_ms: int | None = None,
) -> ToolRun:
    now = timezone.now()
    expires_at = now + timedelta(milliseconds=ttl_ms) if ttl_ms is not None else None
    return ToolRun.objects.create(
        tenant_id=principal.tenant_id,
        subject=principal.subject,
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
        log_level=log_level,
        ttl_ms=ttl_ms,
        expires_at=expires_at,
    )


def run_finish(
    run_id: str,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str = "",
) -> bool:
    """Record a terminal outcome; False when the run already had one."""
    assert status not in ToolRun.ACTIVE
    return bool(
        ToolRun.objects.filter(pk=run_id, status__in=ToolRun.ACTIVE).update(
            status=status,
            result=result,
            error=error,
            status_message=message,
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
    )


def run_set_active_status(run_id: str, status: str) -> bool:
    """working ↔ input_required, only while the run is active."""
    assert status in ToolRun.ACTIVE
    return bool(
        ToolRun.objects.filter(pk=run_id, status__in=ToolRun.ACTIVE).update(status=status, updated_at=timezone.now())
    )


def run_of(principal: Principal, run_id: Any, *, tasks_only: bool = True) -> ToolRun | None:
    """The caller's own run; None for missing, expired and other credentials' runs alike."""
    if not isinstance(run_id, str) or len(run_id) > 32:
        return None
    run = runs_of(principal, tasks_only=tasks_only).filter(pk=run_id).first()
    return run


def runs_of(principal: Principal, *, tasks_only: bool = True) -> QuerySet[ToolRun]:
    runs = ToolRun.objects.filter(tenant_id=principal.tenant_id, subject=principal.subject)
    if tasks_only:
        runs = runs.filter(is_task=True)
    return runs.exclude(expires_at__lt=timezone.now())


def purge_expired_runs() -> int:
    deleted, _ = ToolRun.objects.filter(expires_at__lt=timezone.now()).delete()
    return deleted


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


# --- the Redis side: where a run's messages go ---------------------------------------


class RunSignals:
    """Messages about a run, written to the event logs its client reads.

    A plain background call answers on its POST stream; a task's notifications go on the
    session's standalone GET stream, tagged with the related-task ``_meta``.
    """

    def __init__(self) -> None:
        self.redis = async_redis()
        self.events = EventStore(self.redis, ttl_seconds=settings.MCP_EVENT_TTL_SECONDS)

    async def message(self, run: ToolRun, message: dict[str, Any]) -> None:
        if run.is_task:
            params = message.setdefault("params", {})
            params.setdefault("_meta", {})[RELATED_TASK] = {"taskId": run.id}
            await self._standalone(run, message)
        else:
            await self.events.append(run.session_id, run.stream_id, jsonrpc.dumps(message))

    async def outcome(self, run: ToolRun) -> None:
        """After a terminal transition: the response (plain call) or a status notification (task)."""
        if run.is_task:
            await self.task_status(run)
            pipe = self.redis.pipeline(transaction=False)
            pipe.xadd(names.run_done_key(run.id), {"status": run.status})
            pipe.expire(names.run_done_key(run.id), 3600)
            await pipe.execute()
            return
        if run.status == ToolRun.Status.CANCELLED:
            data = b""  # a cancelled request gets no response; the empty final event ends the stream
        elif run.error is not None:
            data = jsonrpc.dumps({"jsonrpc": "2.0", "id": run.request_id, "error": run.error})
        else:
            # request_id is the JSON-RPC id the call arrived with (a JSONField to keep 1 and "1" apart).
            request_id = cast(jsonrpc.RequestId, run.request_id)
            data = jsonrpc.dumps(jsonrpc.result(request_id, run.result or {"content": []}))
        await self.events.append(run.session_id, run.stream_id, data, final=True)

    async def task_status(self, run: ToolRun) -> None:
        await self._standalone(run, jsonrpc.notification("notifications/tasks/status", task_view(run)))

    async def _standalone(self, run: ToolRun, message: dict[str, Any]) -> None:
        """Append to the session's standalone log and wake whichever process holds its stream."""
        from channels.layers import get_channel_layer

        await self.events.append(run.session_id, STANDALONE_STREAM, jsonrpc.dumps(message))
        wake = {"type": "session.events", "session_id": run.session_id, "tenant_id": run.tenant_id}
        await get_channel_layer().group_send(names.tenant_group(run.tenant_id), wake)

    async def cancel_worker(self, run_id: str) -> None:
        from channels.layers import get_channel_layer

        channel = cast(bytes | None, await self.redis.get(names.run_channel_key(run_id)))
        if channel is not None:
            await get_channel_layer().send(channel.decode(), {"type": "mcp.cancel"})


async def finish_and_signal(
    run_id: str,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    message: str = "",
    run: ToolRun | None = None,
    outcome: str | None = None,
) -> bool:
    """Record the outcome and, if this caller recorded it, deliver it and log the invocation.
    Returns whether it did.

    Pass ``run`` when the caller holds the row already; it saves reading it again.
    ``outcome`` is the invocation log's finer word for it (timed_out, error, …).
    """
    if not await sync_to_async(run_finish)(run_id, status=status, result=result, error=error, message=message):
        return False
    if run is None:
        run = await ToolRun.objects.select_related("tool").aget(pk=run_id)
    else:
        run.status, run.result, run.error, run.status_message = status, result, error, message
        run.updated_at = run.finished_at = timezone.now()
    await RunSignals().outcome(run)
    await sync_to_async(record_run)(run, outcome or status, message)
    return True


async def cancel_run(run_id: str, reason: str = "Cancelled by the client") -> bool:
    """Cancel an active run: record it, end its stream without a response, tell the worker."""
    cancelled = await finish_and_signal(run_id, status=ToolRun.Status.CANCELLED, message=reason)
    if cancelled:
        await RunSignals().cancel_worker(run_id)
    return cancelled
