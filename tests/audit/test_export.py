"""Exports stream the filtered set in keyset chunks: one query per chunk, bytes out before
the next chunk is read, memory bounded by a chunk, under WSGI and ASGI alike."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import Invocation
from console import exports


def _bulk(tenant, count: int, **fields) -> None:
    """``count`` invocations, one per second going back from a minute ago, newest first."""
    start = timezone.now() - timedelta(minutes=1)
    Invocation.objects.bulk_create(
        [
            Invocation(
                tenant=tenant,
                key_label="bulk key (tb_b)",
                tool_name=f"tool_{i % 7}",
                outcome="completed" if i % 10 else "error",
                error_message="" if i % 10 else f"failure number {i}",
                arguments={"i": i, "text": "x" * 40},
                duration_ms=float(i % 100),
                started_at=start - timedelta(seconds=i),
                finished_at=start - timedelta(seconds=i) + timedelta(milliseconds=5),
                **fields,
            )
            for i in range(count)
        ],
        batch_size=2000,
    )


def _rows(body: bytes, kind: str) -> list[dict]:
    if kind == "csv":
        return list(csv.DictReader(io.StringIO(body.decode())))
    return json.loads(body)


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_export_streams_in_chunks_of_one_query_each(operator_client, acme, globex, monkeypatch, kind):
    monkeypatch.setattr(exports, "CHUNK_ROWS", 100)
    _bulk(acme, 450)
    _bulk(globex, 50)
    with CaptureQueriesContext(connection) as queries:
        response = operator_client.get(f"/console/invocations/export.{kind}")
        assert isinstance(response, StreamingHttpResponse)
        before_body = len(queries)
        parts, queries_when = [], []
        for part in response.streaming_content:
            parts.append(part)
            queries_when.append(len(queries) - before_body)
    reads = [q for q in queries.captured_queries[before_body:] if "audit_invocation" in q["sql"]]
    assert len(reads) == 5  # 450 rows in chunks of 100
    assert all(" LIMIT 100" in q["sql"] and "OFFSET" not in q["sql"] for q in reads)
    # Each chunk went out before the next was read: the stream never runs ahead of the reads.
    assert queries_when[:6] == [0, 1, 2, 3, 4, 5]
    rows = _rows(b"".join(parts), kind)
    assert len(rows) == 450 and {row["tenant"] for row in rows} == {"acme"}
    times = [row["started_at"] for row in rows]
    assert times == sorted(times, reverse=True) and len(set(times)) == 450  # newest first, each row once
    assert response["Content-Disposition"].startswith('attachment; filename="invocations-all-')


def test_export_applies_the_filters(operator_client, acme):
    _bulk(acme, 60)
    body = b"".join(operator_client.get("/console/invocations/export.json", {"outcome": "error"}).streaming_content)
    rows = json.loads(body)
    assert len(rows) == 6 and {row["outcome"] for row in rows} == {"error"}
    assert rows[0]["arguments"] == {"i": 0, "text": "x" * 40}
    assert rows[0]["started_at"].endswith("+00:00")
    body = b"".join(operator_client.get("/console/invocations/export.csv", {"q": "number 5"}).streaming_content)
    assert [row["error_message"] for row in _rows(body, "csv")] == ["failure number 50"]


def test_empty_exports_are_valid(operator_client, acme):
    assert json.loads(b"".join(operator_client.get("/console/invocations/export.json").streaming_content)) == []
    body = b"".join(operator_client.get("/console/invocations/export.csv").streaming_content).decode()
    assert body.splitlines()[0].startswith("id,tenant,started_at")
    assert len(body.splitlines()) == 1


def test_csv_cells_cannot_become_spreadsheet_formulas(operator_client, acme, make_invocation):
    make_invocation(acme, "calc", "error", error_message='=HYPERLINK("http://evil","click")', key_label="+1 key")
    row = _rows(b"".join(operator_client.get("/console/invocations/export.csv").streaming_content), "csv")[0]
    assert row["error_message"] == '\'=HYPERLINK("http://evil","click")'
    assert row["key_label"] == "'+1 key"
    raw = json.loads(b"".join(operator_client.get("/console/invocations/export.json").streaming_content))[0]
    assert raw["error_message"].startswith("=HYPERLINK")  # JSON is data, not a spreadsheet


def test_change_export(operator_client, acme, make_key):
    make_key(acme, "exported key")
    rows = json.loads(b"".join(operator_client.get("/console/changes/export.json").streaming_content))
    created = next(row for row in rows if row["object_repr"].startswith("exported key"))
    assert created["action"] == "created" and created["tenant"] == "acme"
    assert created["changes"]["key_hash"] == [None, "[redacted]"]


def _export_peak(client) -> tuple[int, int]:
    """(bytes exported, peak of Python's allocations while streaming them)."""
    response = client.get("/console/invocations/export.csv")
    tracemalloc.start()
    size = 0
    try:
        for part in response.streaming_content:
            size += len(part)
        return size, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_export_holds_one_chunk_in_memory(operator_client, acme, monkeypatch):
    """Memory while streaming is about one chunk, whatever the export's size: 4x the rows,
    same peak, and far below the body (bench/console_bench.py streams 100,000 rows)."""
    monkeypatch.setattr(exports, "CHUNK_ROWS", 400)
    _bulk(acme, 3_000)
    small_size, small_peak = _export_peak(operator_client)
    Invocation.objects.filter(tenant=acme).delete()
    _bulk(acme, 12_000)
    size, peak = _export_peak(operator_client)
    assert size > 2_000_000 and size > 3.5 * small_size
    assert peak < size / 2, f"peak {peak} bytes for a {size}-byte export"
    assert peak < small_peak * 1.5, f"peak {peak} bytes for 12,000 rows, {small_peak} for 3,000"


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_body_is_an_async_stream(acme_operator, acme, monkeypatch):
    """uvicorn serves Toolbay through ASGI: a sync iterator would be read to its end
    (into memory) before the first byte; the export is an async iterator there."""
    monkeypatch.setattr(exports, "CHUNK_ROWS", 100)
    await sync_to_async(_bulk)(acme, 250)
    client = AsyncClient()
    try:
        await sync_to_async(client.force_login)(acme_operator)
        response = await client.get("/console/invocations/export.csv")
        assert response.status_code == 200 and response.is_async
        parts = [part async for part in response.streaming_content]
    finally:
        await sync_to_async(connections.close_all)()  # the thread's connection, before the database is dropped
    assert len(parts) == 1 + 3  # the header, then one part per chunk of 100
    assert len(_rows(b"".join(parts), "csv")) == 250
