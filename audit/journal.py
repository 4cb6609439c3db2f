"""The invocation journal: every call's audit row goes to a Redis stream before the call is answered.

The call path never touches the database for its audit row. It appends the row to the
stream ``JOURNAL_KEY`` (``XADD``, pipelined with the call's other end-of-call Redis
commands) and answers only once Redis took it, so a call whose answer a client received is
recorded even if the process is killed the next instant. ``audit.writer`` (the
``audit_writer`` command that ``make run``, the compose file and the Procfile start) moves
the rows into the database in batches and removes them from the stream only after they
are committed; each row carries a ``call_id`` and the insert skips ids already there, so a
redelivery never writes a row twice.

Backpressure: when no writer drains the stream, it would grow without bound. Each process
reads the stream's length every ``BACKLOG_CHECK_SECONDS`` (piggybacked on a call's own
pipeline) and, past ``AUDIT_JOURNAL_MAX_ROWS``, drops new rows instead, counting them
(``toolbay_audit_rows_dropped_total``) and logging an error at most every
``DROP_LOG_SECONDS``.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from audit.models import MAX_TARGET_LENGTH
from audit.redaction import redact_arguments
from mcp_platform import tracing
from mcp_platform.mcp.text import storable
from mcp_platform.metrics import AUDIT_ROWS_DROPPED, CALLS
from mcp_platform.redis_batch import Command, checked
from mcp_platform.redis_clients import command_batch, sync_redis

log = logging.getLogger(__name__)

JOURNAL_KEY = "toolbay:audit:invocations"
ROW_FIELD = b"r"
BACKLOG_CHECK_SECONDS = 1.0
DROP_LOG_SECONDS = 10.0
DENIED_PER_MINUTE = 30


class _CallIds:
    """Unique call ids without a system call each: 64 random bits drawn once per process
    (again in a forked child, a Celery worker) and a counter, 24 hex digits as before.

    They only need to be unique (the writer skips an id it already has, so a repeat would
    lose a row), never unguessable: nothing is authorized by a call id.
    """

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):08x}"


_call_ids = _CallIds()


def new_call_id() -> str:
    """The invocation's identity: the journal's redeliveries are deduplicated on it."""
    return _call_ids.next()


def invocation_row(
    *,
    tenant_id: int,
    key_id: int | None,
    key_label: str,
    tool_name: str,
    outcome: str,
    started_at: float,
    call_id: str | None = None,
    oauth_subject: str = "",
    oauth_client: str = "",
    session_id: str = "",
    protocol_version: str = "",
    client: dict[str, Any] | None = None,
    tool_id: int | None = None,
    tool_version: int | None = None,
    arguments: Any = None,
    input_schema: Any = None,
    error_message: str = "",
    duration_ms: float | None = None,
    run_id: str = "",
    is_task: bool = False,
    finished_at: float | None = None,
    kind: str = "tool",
    confirmation: str = "",
    confirmed_by: str = "",
    confirmed_at: float | None = None,
    trace_id: str | None = None,
    connection: str = "",
) -> dict[str, Any]:
    """One invocation as the journal carries it: JSON values, times as Unix seconds, sensitive
    arguments (``x-sensitive``/``writeOnly`` in the input schema) already redacted."""
    client = client or {}
    return {
        "call_id": call_id or new_call_id(),
        "tenant_id": tenant_id,
        "key_id": key_id,
        "key_label": key_label[:150],
        "oauth_subject": oauth_subject[:255],
        "oauth_client": oauth_client[:255],
        "session_id": session_id,
        "protocol_version": protocol_version[:16],
        "client_name": str(client.get("name", ""))[:200],
        "client_version": str(client.get("version", ""))[:100],
        "kind": kind,
        "tool_id": tool_id,
        "tool_name": tool_name[:MAX_TARGET_LENGTH],
        "tool_version": tool_version,
        "arguments": redact_arguments(arguments if isinstance(arguments, dict) else {}, input_schema),
        "outcome": outcome,
        "error_message": error_message[:4000],
        "duration_ms": duration_ms,
        "run_id": run_id,
        "is_task": is_task,
        "started_at": started_at,
        "finished_at": finished_at if finished_at is not None else time.time(),
        "confirmation": confirmation,
        "confirmed_by": confirmed_by[:150],
        "confirmed_at": confirmed_at,
        # The call's OpenTelemetry trace (the current one unless given): rows and traces join.
        "trace_id": trace_id or ((tracing.current_trace_id() or None) if tracing.ENABLED else None),
        "connection": connection[:200],
    }


def encode(row: dict[str, Any]) -> bytes:
    """UTF-8 JSON (orjson: cheap on the call path) the database can store: NUL escaped and
    lone surrogates replaced (``mcp_platform.mcp.text``). orjson writes a NUL as ``\\u0000``
    and refuses a lone surrogate, so only such rows pay for the rewrite."""
    try:
        encoded = orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # a lone surrogate
        return orjson.dumps(storable(row), option=orjson.OPT_NON_STR_KEYS)
    if b"\\u0000" in encoded:
        return orjson.dumps(storable(row), option=orjson.OPT_NON_STR_KEYS)
    return encoded


@dataclass
class _Gate:
    """Whether this process still appends rows, from the last backlog it saw."""

    checked_at: float = 0.0
    backlog: int = 0
    dropped_since_log: int = 0
    logged_at: float = 0.0


def _count(row: dict[str, Any]) -> None:
    # toolbay_tool_calls counts tools/call: a resource's URI or a prompt's name is no tool.
    if row["kind"] == "tool":
        CALLS.observe(row["tenant_id"], row["tool_name"], row["outcome"], row["duration_ms"])


class Journal:
    def __init__(self) -> None:
        self._gate = _Gate()
        self._denied: dict[str, tuple[float, int]] = defaultdict(lambda: (0.0, 0))

    def commands(self, row: dict[str, Any]) -> list[Command]:
        """The commands that append the row; the caller sends them (with its own end-of-call
        commands, in one batch) and hands the answers to ``saw`` before answering the call.

        Counts the call for /metrics in any case; with ``AUDIT_INVOCATIONS=0`` or a full
        backlog the row itself is not appended (no commands).
        """
        _count(row)
        if not settings.AUDIT_INVOCATIONS or not self._accepting():
            return []
        commands: list[Command] = [("XADD", JOURNAL_KEY, "*", ROW_FIELD, encode(row))]
        now = time.monotonic()
        if now - self._gate.checked_at >= BACKLOG_CHECK_SECONDS:
            self._gate.checked_at = now
            commands.append(("XLEN", JOURNAL_KEY))
        return commands

    def saw(self, commands: list[Command], answers: list[Any]) -> None:
        """Check the answers to ``commands`` (the last ones of a batch): raise if Redis refused
        the row, note the backlog if it was read."""
        for command, answer in zip(commands, answers[len(answers) - len(commands) :], strict=True):
            if isinstance(answer, Exception):
                raise answer
            if command[0] == "XLEN":
                self._gate.backlog = int(answer)

    async def append(self, row: dict[str, Any]) -> None:
        """Append one row on its own (rows not tied to a call, e.g. refusals)."""
        commands = self.commands(row)
        if commands:
            self.saw(commands, await command_batch().run(commands))

    def append_now(self, row: dict[str, Any]) -> None:
        """Append one row from synchronous code (Celery workers)."""
        _count(row)
        if settings.AUDIT_INVOCATIONS:
            sync_redis().xadd(JOURNAL_KEY, {ROW_FIELD: encode(row)})

    async def append_always(self, row: dict[str, Any]) -> None:
        """``append_now`` from a worker's event loop (a background run's row: never dropped)."""
        self.counted(row)
        commands = self.always_commands(row)
        if commands:
            checked(await command_batch().run(commands))

    def always_commands(self, row: dict[str, Any]) -> list[Command]:
        """What ``append_always`` sends, for a caller that runs it inside its own script
        (a run's outcome: the row goes in only with it); the caller then calls ``counted``."""
        return [("XADD", JOURNAL_KEY, "*", ROW_FIELD, encode(row))] if settings.AUDIT_INVOCATIONS else []

    def counted(self, row: dict[str, Any]) -> None:
        """Count an appended row for /metrics (``always_commands``)."""
        _count(row)

    def allow_denied(self, subject: str) -> bool:
        """Whether one more denied call of this credential may be recorded this minute, so a
        misbehaving client cannot flood the log."""
        window, count = self._denied[subject]
        now = time.monotonic()
        if now - window >= 60:
            self._denied[subject] = (now, 1)
            if len(self._denied) > 10_000:
                self._denied.clear()
            return True
        self._denied[subject] = (window, count + 1)
        return count < DENIED_PER_MINUTE

    def _accepting(self) -> bool:
        gate = self._gate
        now = time.monotonic()
        # Past the check interval one row goes through, and its pipeline reads the length again.
        if gate.backlog < settings.AUDIT_JOURNAL_MAX_ROWS or now - gate.checked_at >= BACKLOG_CHECK_SECONDS:
            return True
        AUDIT_ROWS_DROPPED.inc()
        gate.dropped_since_log += 1
        if now - gate.logged_at >= DROP_LOG_SECONDS:
            log.error(
                "audit journal holds %d rows (AUDIT_JOURNAL_MAX_ROWS=%d): is the audit writer running? "
                "%d invocation rows dropped since the last message",
                gate.backlog,
                settings.AUDIT_JOURNAL_MAX_ROWS,
                gate.dropped_since_log,
            )
            gate.logged_at, gate.dropped_since_log = now, 0
        return False


journal = Journal()
