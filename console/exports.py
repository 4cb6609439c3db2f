"""CSV and JSON exports of a filtered, scoped queryset, streamed in keyset chunks.

Rows are read ``CHUNK_ROWS`` at a time (one query each, newest first) and written out
before the next chunk is read, so an export of any size holds one chunk in memory.
Under ASGI (uvicorn, how Toolbay is served) the body is an async iterator: Django would
otherwise read a sync iterator to its end before sending a byte. Under WSGI it is a plain
iterator.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone

from audit.models import AuditEvent, Invocation
from console.keyset import chunks, fetch_chunk

CHUNK_ROWS = 2000
# A cell starting with one of these is a formula to a spreadsheet; tool errors and
# arguments come from clients, so such cells get a leading apostrophe.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class ExportSpec:
    name: str
    time_field: str
    columns: tuple[str, ...]
    row: Callable[[Any, Callable[[int | None], str]], dict[str, Any]]


def _invocation(row: Invocation, slug_of: Callable[[int | None], str]) -> dict[str, Any]:
    return {
        "id": row.pk,
        "tenant": slug_of(row.tenant_id),
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "duration_ms": row.duration_ms,
        "tool_name": row.tool_name,
        "tool_version": row.tool_version,
        "outcome": row.outcome,
        "error_message": row.error_message,
        "key_id": row.key_id,
        "key_label": row.key_label,
        "session_id": row.session_id,
        "client_name": row.client_name,
        "client_version": row.client_version,
        "run_id": row.run_id,
        "is_task": row.is_task,
        "arguments": row.arguments,
    }


def _audit_event(row: AuditEvent, slug_of: Callable[[int | None], str]) -> dict[str, Any]:
    return {
        "id": row.pk,
        "tenant": slug_of(row.tenant_id) or row.tenant_slug,
        "created_at": row.created_at,
        "actor": row.actor_label,
        "actor_user_id": row.actor_user_id,
        "source": row.source,
        "action": row.action,
        "object_type": row.object_type,
        "object_id": row.object_id,
        "object_repr": row.object_repr,
        "changes": row.changes,
    }


INVOCATIONS = ExportSpec(
    "invocations",
    "started_at",
    (
        "id", "tenant", "started_at", "finished_at", "duration_ms", "tool_name", "tool_version", "outcome",
        "error_message", "key_id", "key_label", "session_id", "client_name", "client_version", "run_id", "is_task",
        "arguments",
    ),
    _invocation,
)  # fmt: skip
AUDIT_EVENTS = ExportSpec(
    "changes",
    "created_at",
    ("id", "tenant", "created_at", "actor", "actor_user_id", "source", "action", "object_type", "object_id",
     "object_repr", "changes"),
    _audit_event,
)  # fmt: skip


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        value = json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)
    elif hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


class _CsvEncoder:
    def __init__(self, spec: ExportSpec) -> None:
        self.spec = spec

    def head(self) -> bytes:
        return self._lines([list(self.spec.columns)])

    def chunk(self, records: list[dict[str, Any]], first: bool) -> bytes:
        return self._lines([[_cell(record[column]) for column in self.spec.columns] for record in records])

    def tail(self, empty: bool) -> bytes:
        return b""

    @staticmethod
    def _lines(rows: list[list[Any]]) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer).writerows(rows)
        return buffer.getvalue().encode()


class _JsonEncoder:
    """A JSON array, one object per line."""

    def head(self) -> bytes:
        return b"["

    def chunk(self, records: list[dict[str, Any]], first: bool) -> bytes:
        body = ",\n".join(json.dumps(record, cls=DjangoJSONEncoder, ensure_ascii=False) for record in records)
        return (("\n" if first else ",\n") + body).encode()

    def tail(self, empty: bool) -> bytes:
        return b"]\n" if empty else b"\n]\n"


def _records(spec: ExportSpec, rows: list[Model], slug_of: Callable[[int | None], str]) -> list[dict[str, Any]]:
    return [spec.row(row, slug_of) for row in rows]


def _sync_body(
    spec: ExportSpec, encoder: Any, rows: QuerySet[Any], slug_of: Callable[[int | None], str]
) -> Iterator[bytes]:
    yield encoder.head()
    first = True
    for chunk in chunks(rows, spec.time_field, CHUNK_ROWS):
        yield encoder.chunk(_records(spec, chunk, slug_of), first)
        first = False
    yield encoder.tail(first)


async def _async_body(
    spec: ExportSpec, encoder: Any, rows: QuerySet[Any], slug_of: Callable[[int | None], str]
) -> AsyncIterator[bytes]:
    yield encoder.head()
    first, cursor = True, None
    read = sync_to_async(fetch_chunk)
    while True:
        chunk, cursor = await read(rows, spec.time_field, CHUNK_ROWS, cursor)
        if chunk:
            yield encoder.chunk(_records(spec, chunk, slug_of), first)
            first = False
        if cursor is None:
            break
    yield encoder.tail(first)


def export_response(
    request: HttpRequest,
    spec: ExportSpec,
    rows: QuerySet[Any],
    *,
    kind: str,
    slug_of: Callable[[int | None], str],
    label: str,
) -> StreamingHttpResponse:
    encoder: Any = _CsvEncoder(spec) if kind == "csv" else _JsonEncoder()
    body = _async_body if isinstance(request, ASGIRequest) else _sync_body
    response = StreamingHttpResponse(
        body(spec, encoder, rows, slug_of),
        content_type="text/csv; charset=utf-8" if kind == "csv" else "application/json",
    )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="{spec.name}-{label}-{stamp}.{kind}"'
    response["X-Accel-Buffering"] = "no"  # nginx: pass the chunks on as they come
    return response
