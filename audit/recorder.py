"""Invocation rows, written in batches so the call path never waits for the database.

An ASGI process queues rows in memory and inserts them with one ``bulk_create`` at most
every ``FLUSH_SECONDS`` (or at ``FLUSH_ROWS``); on shutdown the ASGI lifespan flushes what
is left, so a normal stop loses nothing. Workers, off the call path by definition, insert
directly. Denied calls are recorded too, but at most ``DENIED_PER_MINUTE`` per credential,
so a misbehaving client cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from audit.models import Invocation
from audit.redaction import redact_arguments
from mcp_platform.metrics import CALLS
from tenants.models import ApiKey

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5
FLUSH_ROWS = 500
DENIED_PER_MINUTE = 30


def invocation(
    *,
    tenant_id: int,
    key_id: int | None,
    key_label: str,
    session_id: str = "",
    client: dict[str, Any] | None = None,
    tool_id: int | None = None,
    tool_name: str,
    tool_version: int | None = None,
    arguments: Any = None,
    input_schema: Any = None,
    outcome: str,
    error_message: str = "",
    started_at: datetime,
    duration_ms: float | None = None,
    run_id: str = "",
    is_task: bool = False,
) -> Invocation:
    client = client or {}
    return Invocation(
        tenant_id=tenant_id,
        key_id=key_id,
        key_label=key_label[:150],
        session_id=session_id,
        client_name=str(client.get("name", ""))[:200],
        client_version=str(client.get("version", ""))[:100],
        tool_id=tool_id,
        tool_name=tool_name[:128],
        tool_version=tool_version,
        arguments=redact_arguments(arguments if isinstance(arguments, dict) else {}, input_schema),
        outcome=outcome,
        error_message=error_message[:4000],
        duration_ms=duration_ms,
        run_id=run_id,
        is_task=is_task,
        started_at=started_at,
        finished_at=timezone.now(),
    )


class InvocationRecorder:
    def __init__(self) -> None:
        self._rows: list[Invocation] = []
        self._flusher: asyncio.TimerHandle | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self._denied: dict[str, tuple[float, int]] = defaultdict(lambda: (0.0, 0))

    def add(self, row: Invocation) -> None:
        CALLS.observe(row.tenant_id, row.tool_name, row.outcome, row.duration_ms)
        if not settings.AUDIT_INVOCATIONS:
            return
        self._rows.append(row)
        if len(self._rows) >= FLUSH_ROWS:
            self._start_flush()
        elif self._flusher is None:
            self._flusher = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._start_flush)

    def allow_denied(self, subject: str) -> bool:
        """Whether one more denied call of this credential may be recorded this minute."""
        window, count = self._denied[subject]
        now = time.monotonic()
        if now - window >= 60:
            self._denied[subject] = (now, 1)
            if len(self._denied) > 10_000:
                self._denied.clear()
            return True
        self._denied[subject] = (window, count + 1)
        return count < DENIED_PER_MINUTE

    def _start_flush(self) -> None:
        self._flusher = None
        rows, self._rows = self._rows, []
        if rows:
            task = asyncio.ensure_future(self._write(rows))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _write(self, rows: list[Invocation]) -> None:
        try:
            await sync_to_async(Invocation.objects.bulk_create)(rows, batch_size=FLUSH_ROWS)
        except Exception:
            log.exception("could not write %d invocation rows; keeping them for the next flush", len(rows))
            self._rows[:0] = rows

    async def drain(self) -> None:
        """Write everything queued (ASGI shutdown)."""
        if self._flusher is not None:
            self._flusher.cancel()
        self._start_flush()
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)


def record_now(row: Invocation) -> None:
    """Insert one row immediately (workers, where no batching is needed)."""
    CALLS.observe(row.tenant_id, row.tool_name, row.outcome, row.duration_ms)
    if settings.AUDIT_INVOCATIONS:
        row.save()


recorder = InvocationRecorder()


def record_run(run: Any, outcome: str, message: str = "") -> None:
    """The Invocation row of a background run or MCP task, once it ended (sync; workers)."""
    key_id = int(run.subject.rsplit(":", 1)[1]) if ":key:" in run.subject else None
    key = ApiKey.objects.filter(pk=key_id).only("name", "prefix").first() if key_id is not None else None
    label = f"{key.name} ({key.prefix})" if key is not None else "anonymous"
    began = run.started_at or run.created_at
    record_now(
        invocation(
            tenant_id=run.tenant_id,
            key_id=key_id,
            key_label=label,
            session_id=run.session_id,
            tool_id=run.tool_id,
            tool_name=run.tool_name,
            tool_version=run.tool_version,
            arguments=run.arguments,
            input_schema=run.tool.input_schema if run.tool is not None else None,
            outcome=outcome,
            error_message=message,
            started_at=run.created_at,
            duration_ms=round((timezone.now() - began).total_seconds() * 1000, 3),
            run_id=run.id,
            is_task=run.is_task,
        )
    )
