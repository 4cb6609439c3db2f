"""CSV and JSON exports of a filtered, scoped queryset, streamed in keyset chunks.

Rows are read ``CHUNK_ROWS`` at a time (one query each, newest first, the same keyset
as the pages) and written out before the next chunk is read, so an export of any size
holds one chunk in memory. Under ASGI (uvicorn, how Toolbay is served) the body is an
async iterator: Django would otherwise read a sync iterator to its end before sending a
byte. Under WSGI it is a plain iterator.

Rows are read as tuples (``values_list``) and each column has one converter chosen up
front; on PostgreSQL the database also renders timestamps and JSON as text, which is
where the time went otherwise (Django's timestamptz loader is pure Python). Measured
with bench/console_bench.py on 100,000 rows: model instances and per-cell type checks
12.1 s, tuples 9.1 s, text from the database 3.4 s.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import connection
from django.db.models import CharField, F, Func, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone

from console.keyset import Cursor, older_than

CHUNK_ROWS = 2000
# A cell starting with one of these is a formula to a spreadsheet; tool errors and
# arguments come from clients, so such cells get a leading apostrophe.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

TEXT, TIME, JSON, PLAIN, TENANT = "text", "time", "json", "plain", "tenant"


@dataclass(frozen=True)
class Column:
    name: str
    kind: str = TEXT
    field: str = ""  # the model field; defaults to the name

    @property
    def source(self) -> str:
        return self.field or self.name


@dataclass(frozen=True)
class ExportSpec:
    name: str
    time_field: str
    columns: tuple[Column, ...]

    def index(self, name: str) -> int:
        return next(i for i, column in enumerate(self.columns) if column.source == name)


INVOCATIONS = ExportSpec(
    "invocations",
    "started_at",
    (
        Column("id", PLAIN),
        Column("tenant", TENANT, "tenant_id"),
        Column("started_at", TIME),
        Column("finished_at", TIME),
        Column("duration_ms", PLAIN),
        Column("kind"),
        Column("tool_name"),
        Column("tool_version", PLAIN),
        Column("outcome"),
        Column("error_message"),
        Column("key_id", PLAIN),
        Column("key_label"),
        Column("oauth_subject"),
        Column("oauth_client"),
        Column("session_id"),
        Column("protocol_version"),
        Column("client_name"),
        Column("client_version"),
        Column("run_id"),
        Column("is_task", PLAIN),
        Column("arguments", JSON),
    ),
)
AUDIT_EVENTS = ExportSpec(
    "changes",
    "created_at",
    (
        Column("id", PLAIN),
        Column("tenant", TENANT, "tenant_id"),
        Column("created_at", TIME),
        Column("actor", TEXT, "actor_label"),
        Column("actor_user_id", PLAIN),
        Column("oauth_subject"),
        Column("oauth_client"),
        Column("source"),
        Column("action"),
        Column("object_type"),
        Column("object_id"),
        Column("object_repr"),
        Column("changes", JSON),
    ),
)


# PostgreSQL renders these as text, in the same form Python would have produced.
_PG_TIME = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"


def _selected(spec: ExportSpec) -> list[Any]:
    if connection.vendor != "postgresql":
        return [column.source for column in spec.columns]
    selected: list[Any] = []
    for column in spec.columns:
        if column.kind == TIME:
            selected.append(Func(F(column.source), template=_PG_TIME, output_field=CharField()))
        elif column.kind == JSON:
            selected.append(Cast(F(column.source), TextField()))
        else:
            selected.append(column.source)
    return selected


def _safe_text(value: str | None) -> str:
    if not value:
        return ""
    return "'" + value if value.startswith(_FORMULA_START) else value


def _time(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _json_text(value: Any) -> str:
    """A JSON column as JSON text (PostgreSQL already sent text)."""
    return value if isinstance(value, str) else _dumps(value)


def _datetime(value: datetime | str) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _converters(spec: ExportSpec, kind: str, slug_of: Callable[[int | None], str]) -> list[Callable[[Any], Any]]:
    table: dict[str, Callable[[Any], Any]]
    if kind == "csv":
        table = {
            TEXT: _safe_text,
            TIME: lambda v: _time(v) or "",
            JSON: lambda v: _safe_text(_json_text(v)),
            PLAIN: lambda v: v,
            TENANT: slug_of,
        }
    else:
        table = {TEXT: lambda v: v, TIME: _time, JSON: _json_text, PLAIN: lambda v: v, TENANT: slug_of}
    return [table[column.kind] for column in spec.columns]


class _CsvEncoder:
    def __init__(self, spec: ExportSpec, convert: list[Callable[[Any], Any]]) -> None:
        self.spec, self.convert = spec, convert

    def head(self) -> bytes:
        return self._lines([[column.name for column in self.spec.columns]])

    def chunk(self, rows: list[tuple[Any, ...]], first: bool) -> bytes:
        convert = self.convert
        return self._lines([[fn(value) for fn, value in zip(convert, row, strict=False)] for row in rows])

    def tail(self, empty: bool) -> bytes:
        return b""

    @staticmethod
    def _lines(rows: list[list[Any]]) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer).writerows(rows)
        return buffer.getvalue().encode()


class _JsonEncoder:
    """A JSON array, one object per line. JSON columns (always last) are spliced in as text."""

    def __init__(self, spec: ExportSpec, convert: list[Callable[[Any], Any]]) -> None:
        plain = [column for column in spec.columns if column.kind != JSON]
        assert spec.columns[: len(plain)] == tuple(plain), "JSON columns come last"
        self.names, self.convert = [column.name for column in plain], convert
        self.spliced = [(f', "{column.name}": ', len(plain) + i) for i, column in enumerate(spec.columns[len(plain) :])]

    def head(self) -> bytes:
        return b"["

    def chunk(self, rows: list[tuple[Any, ...]], first: bool) -> bytes:
        body = ",\n".join(self._line(row) for row in rows)
        return (("\n" if first else ",\n") + body).encode()

    def tail(self, empty: bool) -> bytes:
        return b"]\n" if empty else b"\n]\n"

    def _line(self, row: tuple[Any, ...]) -> str:
        line = _dumps({name: fn(value) for name, fn, value in zip(self.names, self.convert, row, strict=False)})
        return line[:-1] + "".join(key + _json_text(row[index]) for key, index in self.spliced) + "}"


def read_chunk(
    rows: QuerySet[Any], spec: ExportSpec, after: Cursor | None
) -> tuple[list[tuple[Any, ...]], Cursor | None]:
    """One chunk of rows (as tuples, newest first) and the cursor after it (None: done)."""
    if after is not None:
        rows = rows.filter(older_than(after, spec.time_field))
    chunk = list(rows.order_by(f"-{spec.time_field}", "-pk").values_list(*_selected(spec))[:CHUNK_ROWS])
    if len(chunk) < CHUNK_ROWS:
        return chunk, None
    last = chunk[-1]
    return chunk, Cursor(_datetime(last[spec.index(spec.time_field)]), last[spec.index("id")])


def _sync_body(spec: ExportSpec, encoder: Any, rows: QuerySet[Any]) -> Iterator[bytes]:
    yield encoder.head()
    first, cursor = True, None
    while True:
        chunk, cursor = read_chunk(rows, spec, cursor)
        if chunk:
            yield encoder.chunk(chunk, first)
            first = False
        if cursor is None:
            break
    if tail := encoder.tail(first):
        yield tail


async def _async_body(spec: ExportSpec, encoder: Any, rows: QuerySet[Any]) -> AsyncIterator[bytes]:
    yield encoder.head()
    first, cursor = True, None
    read = sync_to_async(read_chunk)
    while True:
        chunk, cursor = await read(rows, spec, cursor)
        if chunk:
            yield encoder.chunk(chunk, first)
            first = False
        if cursor is None:
            break
    if tail := encoder.tail(first):
        yield tail


def export_response(
    request: HttpRequest,
    spec: ExportSpec,
    rows: QuerySet[Any],
    *,
    kind: str,
    slug_of: Callable[[int | None], str],
    label: str,
) -> StreamingHttpResponse:
    convert = _converters(spec, kind, slug_of)
    encoder: Any = _CsvEncoder(spec, convert) if kind == "csv" else _JsonEncoder(spec, convert)
    body = _async_body if isinstance(request, ASGIRequest) else _sync_body
    response = StreamingHttpResponse(
        body(spec, encoder, rows),
        content_type="text/csv; charset=utf-8" if kind == "csv" else "application/json",
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="{spec.name}-{label}-{stamp}.{kind}"'
    response["X-Accel-Buffering"] = "no"  # nginx: pass the chunks on as they come
    return response
