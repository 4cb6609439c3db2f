"""The audit writer: moves invocation rows from the Redis journal into the database.

Runs as its own process (``manage.py audit_writer``; ``make run``, the compose file and the
Procfile start one; more may run, they share the work). It reads the journal
(``audit.journal``) as a member of one Redis consumer group, inserts each batch in one
transaction, and only then acknowledges and deletes the entries. A writer killed at any
point leaves its entries pending; another writer (or this one, restarted) claims them once
they have been idle ``AUDIT_WRITER_CLAIM_IDLE_SECONDS`` and inserts them again, and the
insert skips call ids that are already there, so nothing is lost and nothing doubles.

One bad row never blocks the rest: a batch the database refuses is written row by row, and
a row that still fails is quarantined (``QuarantinedInvocation``) with the database's
error and acknowledged. A database that cannot be reached is different: nothing is
acknowledged, and the batch is tried again after a pause.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import redis
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from psycopg.types.json import Jsonb

from audit.journal import JOURNAL_KEY, ROW_FIELD
from audit.models import Invocation, QuarantinedInvocation
from mcp_platform.mcp.text import storable
from mcp_platform.write_behind import DatabaseUnavailable, Entries, StreamWriter

log = logging.getLogger(__name__)

GROUP = "audit-writers"
# The columns a journal row fills, in this order (the id is the database's).
COLUMNS = (
    "call_id",
    "tenant_id",
    "key_id",
    "key_label",
    "oauth_subject",
    "oauth_client",
    "session_id",
    "protocol_version",
    "client_name",
    "client_version",
    "kind",
    "tool_id",
    "tool_name",
    "tool_version",
    "arguments",
    "outcome",
    "error_message",
    "duration_ms",
    "run_id",
    "is_task",
    "started_at",
    "finished_at",
    "confirmation",
    "confirmed_by",
    "confirmed_at",
    "trace_id",
    "connection",
)
# Columns added after the first journal rows were written: rows from older processes (a
# rolling deploy) lack them and get these values.
LATER_COLUMNS = {
    "protocol_version": "",
    "kind": "tool",
    "oauth_subject": "",
    "oauth_client": "",
    "confirmation": "",
    "confirmed_by": "",
    "confirmed_at": None,
    "trace_id": None,
    "connection": "",
}


@dataclass(frozen=True)
class Entry:
    journal_id: str
    raw: bytes
    row: dict[str, Any] | None  # None: the payload could not be decoded
    problem: str = ""


def _decode(journal_id: bytes, fields: dict[bytes, bytes]) -> Entry:
    raw = fields.get(ROW_FIELD, b"")
    try:
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError:
            row = json.loads(raw)  # ASCII rows with escapes orjson refuses (lone surrogates)
        if not isinstance(row, dict):
            raise ValueError("not an invocation row")
        if b"\\u0000" in raw:  # from a process older than the journal's own escaping
            row = storable(row)
        for column, value in LATER_COLUMNS.items():
            row.setdefault(column, value)
        if not all(column in row for column in COLUMNS):
            raise ValueError("not an invocation row")
    except ValueError as exc:
        return Entry(journal_id.decode(), raw, None, f"undecodable journal entry: {exc}")
    return Entry(journal_id.decode(), raw, row)


def _tenant_of(entry: Entry) -> int | None:
    tenant_id = entry.row.get("tenant_id") if entry.row is not None else None
    return tenant_id if isinstance(tenant_id, int) and not isinstance(tenant_id, bool) else None


def _when(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _when_or_none(seconds: float | None) -> datetime | None:
    return _when(seconds) if seconds is not None else None


_TIMES = ("started_at", "finished_at", "confirmed_at")
_REQUIRED = tuple(column for column in COLUMNS if column not in LATER_COLUMNS)


def _text_array(names: Sequence[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{name}'" for name in names) + "]"


def _column_sql(column: str) -> str:
    """The value of ``column`` in the INSERT … SELECT of ``_insert_raw``."""
    if column in _TIMES:  # Unix seconds in the row, a timestamp in the table
        return f"to_timestamp((raw.d->>'{column}')::float8)"
    default = LATER_COLUMNS.get(column)
    if isinstance(default, str):  # an older process's row lacks it
        return f"COALESCE(r.{column}, '{default}')"
    return f"r.{column}"


_INSERT_RAW = (
    "WITH malformed AS ("
    "  SELECT count(*) AS n FROM audit_invocation_raw"
    f"  WHERE jsonb_typeof(d) <> 'object' OR NOT d ?& {_text_array(_REQUIRED)}"
    "), inserted AS ("
    f"  INSERT INTO audit_invocation ({', '.join(COLUMNS)})"
    f"  SELECT {', '.join(_column_sql(column) for column in COLUMNS)}"
    "  FROM audit_invocation_raw AS raw,"
    f"  LATERAL jsonb_populate_record(NULL::audit_invocation, raw.d - {_text_array(_TIMES)}) AS r"
    "  WHERE (SELECT n FROM malformed) = 0"
    "  ON CONFLICT (call_id) DO NOTHING"
    ") SELECT n FROM malformed"
)


def _copy_line(raw: bytes) -> bytes:
    """One value of COPY's text format, a line: a backslash starts an escape, a newline ends the row."""
    raw = raw.replace(b"\\", b"\\\\")
    if b"\n" in raw or b"\r" in raw or b"\t" in raw:  # never in orjson's output; in a foreign entry
        raw = raw.replace(b"\n", b"\\n").replace(b"\r", b"\\r").replace(b"\t", b"\\t")
    return raw + b"\n"


class MalformedBatch(ValueError):
    """A batch with an entry that is no invocation row: it goes the row-by-row way."""


def _insert_raw(payloads: Sequence[bytes]) -> None:
    """The journal's JSON as it is, decoded by PostgreSQL: COPY into a session-local staging
    table of one ``jsonb`` column, then one INSERT … SELECT … ON CONFLICT DO NOTHING (a
    redelivered call id is skipped). Python touches each row once, to escape it for COPY:
    decoding every row and formatting its 27 values in Python cost the writer about 45 µs a
    row. Raises MalformedBatch (nothing
    written) when an entry is not an object with every column, and the database's error
    when a value does not fit; the caller then takes the row-by-row way."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE IF NOT EXISTS audit_invocation_raw (d jsonb) ON COMMIT DELETE ROWS")
        raw_cursor = cursor.cursor  # psycopg's own cursor: COPY is not in the DB-API
        with (
            connection.wrap_database_errors,  # psycopg's errors as Django's, like every other query
            raw_cursor.copy("COPY audit_invocation_raw (d) FROM STDIN") as copy,
        ):
            copy.write(b"".join(_copy_line(payload) for payload in payloads))
        cursor.execute(_INSERT_RAW)
        (malformed,) = cursor.fetchone()
    if malformed:
        raise MalformedBatch(f"{malformed} entries are not invocation rows")


def _insert_postgresql(rows: Sequence[dict[str, Any]]) -> None:
    """Decoded rows (the row-by-row way): COPY into a session-local staging table, then one
    INSERT … ON CONFLICT DO NOTHING, so a redelivered call id is skipped."""
    columns = ", ".join(COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS audit_invocation_incoming ON COMMIT DELETE ROWS AS "
            f"SELECT {columns} FROM audit_invocation WITH NO DATA"
        )
        raw_cursor = cursor.cursor  # psycopg's own cursor: COPY is not in the DB-API
        with (
            connection.wrap_database_errors,  # psycopg's errors as Django's, like every other query
            raw_cursor.copy(f"COPY audit_invocation_incoming ({columns}) FROM STDIN") as copy,
        ):
            for row in rows:
                values = dict(row, arguments=Jsonb(row["arguments"]))
                values["started_at"], values["finished_at"] = _when(row["started_at"]), _when(row["finished_at"])
                values["confirmed_at"] = _when_or_none(row["confirmed_at"])
                copy.write_row([values[column] for column in COLUMNS])
        cursor.execute(
            f"INSERT INTO audit_invocation ({columns}) SELECT {columns} FROM audit_invocation_incoming "
            "ON CONFLICT (call_id) DO NOTHING"
        )


def invocation_from_row(row: dict[str, Any]) -> Invocation:
    """The (unsaved) model instance of a journal row."""
    values = {column: row[column] for column in COLUMNS}
    values["started_at"], values["finished_at"] = _when(row["started_at"]), _when(row["finished_at"])
    values["confirmed_at"] = _when_or_none(row["confirmed_at"])
    return Invocation(**values)


def _insert_other(rows: Sequence[dict[str, Any]]) -> None:
    """SQLite (the embedded default) and anything else: one INSERT per row, conflicts skipped."""
    Invocation.objects.bulk_create([invocation_from_row(row) for row in rows], ignore_conflicts=True)


def insert_rows(rows: Sequence[dict[str, Any]]) -> None:
    """Insert journal rows in one transaction; rows whose call id is already there are skipped."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            _insert_postgresql(rows)
        else:
            _insert_other(rows)


def write_entries(entries: Sequence[Entry], insert: Callable[[Sequence[dict[str, Any]]], None] = insert_rows) -> int:
    """Write decodable entries (quarantining what the database refuses); returns rows quarantined.

    Raises DatabaseUnavailable when the database cannot be reached at all.
    """
    good = [entry for entry in entries if entry.row is not None]
    bad = [entry for entry in entries if entry.row is None]
    try:
        if good:
            insert([cast(dict[str, Any], entry.row) for entry in good])
            good = []
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnavailable(str(exc)) from exc
    except (DatabaseError, ValueError, TypeError) as exc:
        log.warning("audit writer: a batch of %d rows failed (%s); writing them one by one", len(good), exc)
    for entry in good:
        try:
            insert([cast(dict[str, Any], entry.row)])
        except (OperationalError, InterfaceError) as exc:
            raise DatabaseUnavailable(str(exc)) from exc
        except (DatabaseError, ValueError, TypeError) as exc:
            bad.append(Entry(entry.journal_id, entry.raw, entry.row, f"{type(exc).__name__}: {exc}"))
    if bad:
        QuarantinedInvocation.objects.bulk_create(
            QuarantinedInvocation(
                journal_id=entry.journal_id,
                tenant_id=_tenant_of(entry),
                payload=storable(entry.raw.decode("utf-8", errors="backslashreplace")),
                error=storable(entry.problem[:4000]),
            )
            for entry in bad
        )
        for entry in bad:
            log.error("audit writer: quarantined journal entry %s: %s", entry.journal_id, entry.problem)
    return len(bad)


class JournalWriter(StreamWriter):
    """The invocation journal's writer (``StreamWriter``: the consumer group's loop)."""

    stream = JOURNAL_KEY
    group = GROUP
    label = "audit writer"

    def __init__(self, client: redis.Redis, **options: Any) -> None:
        super().__init__(client, **options)
        self.written = 0
        self.quarantined = 0

    def write(self, entries: Entries) -> None:
        # A pending entry already deleted comes back without fields: it only needs its ack.
        present = [(journal_id, fields) for journal_id, fields in entries if fields]
        if connection.vendor == "postgresql" and self._write_raw([fields.get(ROW_FIELD, b"") for _, fields in present]):
            self.written += len(present)
            return
        decoded = [_decode(journal_id, fields) for journal_id, fields in present]
        quarantined = write_entries(decoded)
        self.written += len(decoded) - quarantined
        self.quarantined += quarantined

    @staticmethod
    def _write_raw(payloads: list[bytes]) -> bool:
        """The batch as PostgreSQL decodes it, in one transaction; False when some entry needs
        the row-by-row way (undecodable, not a row, a value the table refuses)."""
        if not payloads:
            return True
        try:
            with transaction.atomic():
                _insert_raw(payloads)
        except (OperationalError, InterfaceError) as exc:
            raise DatabaseUnavailable(str(exc)) from exc
        except (DatabaseError, MalformedBatch) as exc:
            log.warning("audit writer: a batch of %d entries needs a closer look (%s)", len(payloads), exc)
            return False
        return True


def backlog(client: redis.Redis) -> int:
    """Rows in the journal not yet written (entries are deleted once written)."""
    return int(client.xlen(JOURNAL_KEY))
