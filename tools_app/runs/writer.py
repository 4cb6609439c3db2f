"""The run writer: moves runs' states from the Redis changes stream into ``ToolRun`` rows.

It runs inside ``manage.py audit_writer`` (its own thread: ``mcp_platform.write_behind``),
so every deployment that writes the invocation journal writes runs too. Like the journal
writer it reads as a member of one consumer group, upserts a batch in one transaction and
only then acknowledges and deletes the entries; a writer killed at any point leaves them
pending, and another (or this one, restarted) claims and writes them again. The upsert is
idempotent on the run id and never replaces a newer version with an older one, so order
and repetition do not matter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction

from mcp_platform.redis_clients import sync_redis
from mcp_platform.write_behind import DatabaseUnavailable, Entries, StreamWriter
from tools_app.catalog.models import Tool
from tools_app.runs import store
from tools_app.runs.models import ToolRun

log = logging.getLogger(__name__)

GROUP = "run-writers"


def _upsert_sql() -> tuple[str, list[str]]:
    """One run's upsert; its parameters are the attributes named in the returned order. A
    tool deleted meanwhile leaves the run without one, as its foreign key says."""
    fields = [field for field in ToolRun._meta.concrete_fields]
    table, quote = ToolRun._meta.db_table, connection.ops.quote_name
    columns_of = [cast(str, field.column) for field in fields]
    columns = ", ".join(quote(column) for column in columns_of)
    values = ", ".join(
        f"(SELECT id FROM {quote(Tool._meta.db_table)} WHERE id = %s)" if field.attname == "tool_id" else "%s"
        for field in fields
    )
    updates = ", ".join(f"{quote(column)} = excluded.{quote(column)}" for column in columns_of[1:])
    sql = (
        f"INSERT INTO {quote(table)} ({columns}) VALUES ({values}) ON CONFLICT ({quote('id')}) "
        f"DO UPDATE SET {updates} WHERE {quote(table)}.{quote('version')} < excluded.{quote('version')}"
    )
    return sql, [field.attname for field in fields]


def _params(run: ToolRun) -> list[Any]:
    return [field.get_db_prep_save(getattr(run, field.attname), connection) for field in ToolRun._meta.concrete_fields]


def upsert(runs: Sequence[ToolRun]) -> None:
    """Write these runs' states in one transaction (the newest version of each wins)."""
    sql, _ = _upsert_sql()
    # In the order of the run ids: two writers' batches holding the same runs then lock their
    # rows in the same order, so one waits for the other instead of both deadlocking.
    ordered = sorted(runs, key=lambda run: run.id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, [_params(run) for run in ordered])


def write(runs: Sequence[ToolRun]) -> None:
    """Write the batch; a batch the database refuses is written run by run, and a run it
    still refuses (its tenant was deleted) is logged and left out."""
    try:
        upsert(runs)
        return
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnavailable(str(exc)) from exc
    except DatabaseError as exc:
        log.warning("run writer: a batch of %d runs failed (%s); writing them one by one", len(runs), exc)
    for run in runs:
        try:
            upsert([run])
        except (OperationalError, InterfaceError) as exc:
            raise DatabaseUnavailable(str(exc)) from exc
        except DatabaseError as exc:
            log.error("run writer: run %s (version %d) not written: %s", run.id, run.version, exc)


class RunWriter(StreamWriter):
    """The runs' changes writer (``StreamWriter``: the consumer group's loop). Of the
    changes of one run in a batch, only its newest version is written."""

    stream = store.CHANGES_KEY
    group = GROUP
    label = "run writer"

    def __init__(self, client: redis.Redis, **options: Any) -> None:
        super().__init__(client, **options)
        self.written = 0
        self._versions: dict[str, int] = {}

    def write(self, entries: Entries) -> None:
        newest: dict[str, ToolRun] = {}
        for _, fields in entries:
            if not fields:  # a pending entry already deleted: it only needs its ack
                continue
            run = store.run_from(fields)
            if run.id not in newest or newest[run.id].version < run.version:
                newest[run.id] = run
        if newest:
            write(list(newest.values()))
        self._versions = {run.id: run.version for run in newest.values()}

    def acknowledged(self, entries: Entries) -> None:
        store.written(self._redis, self._versions)
        self.written += len(self._versions)


def write_runs(should_stop: Callable[[], bool]) -> None:
    """The writer's loop, for ``mcp_platform.write_behind`` (until ``should_stop``)."""
    writer = RunWriter(
        sync_redis(),
        batch_rows=settings.AUDIT_WRITER_BATCH_ROWS,
        claim_idle_seconds=settings.AUDIT_WRITER_CLAIM_IDLE_SECONDS,
        linger_seconds=settings.AUDIT_WRITER_LINGER_MS / 1000,
    )
    log.info("run writer %s: writing runs to the database", writer.name)
    try:
        writer.run(should_stop)
    finally:
        connection.close()
