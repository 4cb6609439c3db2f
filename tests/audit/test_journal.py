"""The invocation journal and its writer: rows go through Redis into the database, each once.

Real Redis (the suite's db) and the real database; the writer runs in this process here.
tests/mcp/test_invocation_log.py drives the same through MCP calls on live servers, and
tests/mcp/test_journal_kill.py kills the processes on both sides of the journal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.test import override_settings

from audit.journal import JOURNAL_KEY, ROW_FIELD, Journal, encode, invocation_row, journal
from audit.models import Invocation, Outcome, QuarantinedInvocation
from audit.writer import COLUMNS, GROUP, LATER_COLUMNS, Entry, JournalWriter, write_entries
from mcp_platform.metrics import CALLS
from mcp_platform.redis_clients import async_redis, sync_redis
from tenants.models import Tenant
from tests.poll import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _empty_journal() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(JOURNAL_KEY)
    CALLS.clear()
    yield client
    client.delete(JOURNAL_KEY)
    client.close()
    CALLS.clear()


def _writer(name: str = "test-writer", claim_idle_seconds: float = 30.0) -> JournalWriter:
    writer = JournalWriter(sync_redis(), batch_rows=100, claim_idle_seconds=claim_idle_seconds, block_ms=10, name=name)
    writer.ensure_group()
    return writer


def _row(tenant, tool: str = "echo", **fields):
    return invocation_row(
        tenant_id=tenant.pk, key_id=None, key_label="anonymous", tool_name=tool, started_at=time.time(), **fields
    )


def test_each_outcome_becomes_one_row_and_one_count(acme):
    for outcome in Outcome.values:
        journal.append_now(
            _row(
                acme,
                f"tool_{outcome}",
                session_id="journal-test",
                arguments={"password": "hunter2", "q": "x"},
                input_schema={"type": "object", "properties": {"password": {"x-sensitive": True}}},
                outcome=outcome,
                error_message="" if outcome == "completed" else f"{outcome} happened",
                duration_ms=1.5,
            )
        )
    assert _writer().step() == len(Outcome.values)
    rows = list(Invocation.objects.filter(session_id="journal-test").order_by("id"))
    assert [row.outcome for row in rows] == Outcome.values
    assert all(row.tool_name == f"tool_{row.outcome}" for row in rows)
    assert all(row.arguments == {"password": "[redacted]", "q": "x"} for row in rows)
    assert all(row.call_id and row.duration_ms == 1.5 for row in rows)
    calls, latency = CALLS.snapshot()
    assert {key[2]: count for key, count in calls.items() if key[0] == acme.pk} == dict.fromkeys(Outcome.values, 1)
    assert all(sum(buckets) == 1 for (tenant_id, _), (buckets, _) in latency.items() if tenant_id == acme.pk)


def test_written_rows_leave_the_journal(acme, _empty_journal):
    for _ in range(3):
        journal.append_now(_row(acme, outcome=Outcome.COMPLETED))
    assert _empty_journal.xlen(JOURNAL_KEY) == 3
    _writer().step()
    assert _empty_journal.xlen(JOURNAL_KEY) == 0
    assert _empty_journal.xpending(JOURNAL_KEY, GROUP)["pending"] == 0
    assert Invocation.objects.filter(tenant=acme).count() == 3


def test_a_redelivered_row_is_written_once(acme, _empty_journal):
    row = _row(acme, outcome=Outcome.COMPLETED)
    # The same call id twice (a retried append), and again after the first was written.
    journal.append_now(row)
    journal.append_now(row)
    _writer().step()
    journal.append_now(row)
    _writer().step()
    assert Invocation.objects.filter(call_id=row["call_id"]).count() == 1


def test_rows_a_dead_writer_took_are_taken_over(acme, _empty_journal):
    rows = [_row(acme, outcome=Outcome.COMPLETED) for _ in range(5)]
    for row in rows:
        journal.append_now(row)
    dead = _writer("dead-writer")
    # It took the rows and died before writing them: they are pending under its name.
    taken = _empty_journal.xreadgroup(GROUP, dead.name, {JOURNAL_KEY: ">"}, count=100)
    assert len(taken[0][1]) == 5
    survivor = _writer("survivor", claim_idle_seconds=0.1)

    def written() -> bool:
        survivor._claimed_at = 0.0  # claim on every step, as after CLAIM_EVERY_SECONDS
        survivor.step()
        return Invocation.objects.filter(tenant=acme).count() >= 5

    wait_for(written, message="the survivor to write the dead writer's five rows")
    assert sorted(Invocation.objects.filter(tenant=acme).values_list("call_id", flat=True)) == sorted(
        row["call_id"] for row in rows
    )
    assert _empty_journal.xpending(JOURNAL_KEY, GROUP)["pending"] == 0


def test_writers_gone_are_forgotten_unless_they_hold_entries(acme, _empty_journal):
    journal.append_now(_row(acme, outcome=Outcome.COMPLETED))
    writer = JournalWriter(sync_redis(), batch_rows=100, claim_idle_seconds=30, block_ms=10, gone_after_seconds=0)
    writer.ensure_group()
    _empty_journal.xgroup_createconsumer(JOURNAL_KEY, GROUP, "gone-empty")
    # This one died holding the row: removing its name would take the row off the pending
    # list, where no writer could claim it any more.
    _empty_journal.xreadgroup(GROUP, "gone-holding", {JOURNAL_KEY: ">"}, count=1)
    assert writer.forget_gone_writers() == ["gone-empty"]
    names = {consumer["name"] for consumer in _empty_journal.xinfo_consumers(JOURNAL_KEY, GROUP)}
    assert names == {b"gone-holding"}
    assert _empty_journal.xpending(JOURNAL_KEY, GROUP)["pending"] == 1


def test_a_row_the_database_refuses_is_quarantined_and_no_other_row_is_lost(acme, _empty_journal):
    doomed = Tenant.objects.create(slug="doomed", name="Deleted before its rows were written")
    good = [_row(acme, outcome=Outcome.COMPLETED) for _ in range(3)]
    # NUL is stored escaped (mcp_platform.mcp.text), never refused: these are written too.
    nul = _row(acme, outcome=Outcome.ERROR, arguments={"text": "a\u0000b"}, error_message="bad \u0000 byte")
    older = _row(acme, outcome=Outcome.COMPLETED, arguments={"k\u0000": "v"})  # a process that did not escape
    orphan = _row(doomed, outcome=Outcome.COMPLETED)  # its tenant is gone: the foreign key refuses it
    doomed.delete()
    journal.append_now(good[0])
    journal.append_now(nul)
    journal.append_now(orphan)
    _empty_journal.xadd(JOURNAL_KEY, {ROW_FIELD: orjson.dumps(older)})
    journal.append_now(good[1])
    _empty_journal.xadd(JOURNAL_KEY, {ROW_FIELD: b"not json"})
    journal.append_now(good[2])
    writer = _writer()
    writer.step()

    written = {row.call_id: row for row in Invocation.objects.filter(tenant=acme)}
    assert set(written) == {row["call_id"] for row in [*good, nul, older]}
    assert written[nul["call_id"]].arguments == {"text": "a\\u0000b"}
    assert written[nul["call_id"]].error_message == "bad \\u0000 byte"
    assert written[older["call_id"]].arguments == {"k\\u0000": "v"}
    quarantined = {row.payload: row for row in QuarantinedInvocation.objects.all()}
    assert len(quarantined) == 2
    [refused] = [row for payload, row in quarantined.items() if orphan["call_id"] in payload]
    assert "IntegrityError" in refused.error and refused.tenant_id == orphan["tenant_id"]
    assert "undecodable" in quarantined["not json"].error and quarantined["not json"].tenant_id is None
    assert (writer.written, writer.quarantined) == (5, 2)
    # Nothing is left to retry: the next rows go through as usual.
    journal.append_now(_row(acme, outcome=Outcome.ERROR))
    writer.step()
    assert Invocation.objects.filter(tenant=acme).count() == 6
    assert _empty_journal.xlen(JOURNAL_KEY) == 0
    assert _empty_journal.xpending(JOURNAL_KEY, GROUP)["pending"] == 0


def _columns(row: Invocation, leaving_out: tuple[str, ...] = ()) -> dict[str, object]:
    return {column: getattr(row, column) for column in COLUMNS if column not in ("call_id", *leaving_out)}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL decodes a batch's JSON itself")
def test_postgresql_decodes_a_batch_as_python_would(acme, _empty_journal):
    """The batch path (PostgreSQL decodes the JSON) stores exactly what the row-by-row path does."""
    fields = dict(
        key_id=7,
        key_label="ci key",
        oauth_subject="user@example.com",
        oauth_client="client-1",
        session_id="s" * 43,
        protocol_version="2025-11-25",
        client={"name": "agent", "version": "1.2"},
        tool_id=3,
        tool_version=2,
        # COPY's own escapes (backslash, tab, newline) and text outside ASCII, in keys and values.
        arguments={"path": "C:\\temp\\new", "tab\tkey": "line\nbreak\r", "snow": "☃ 雪", "n": [1, 2.5, None, True]},
        outcome=Outcome.ERROR,
        error_message='it said "no" \\ twice',
        duration_ms=12.25,
        run_id="r" * 32,
        is_task=True,
        confirmation="approved",
        confirmed_by="op",
        confirmed_at=time.time() - 5,
        trace_id="0af7651916cd43dd8448eb211c80319c",
        connection="github",
    )
    started_at = time.time()
    by_batch, by_row = (
        invocation_row(
            tenant_id=acme.pk, tool_name="echo", started_at=started_at, finished_at=started_at + 0.0123, **fields
        )
        for _ in range(2)
    )
    journal.append_now(by_batch)
    writer = _writer()
    writer.step()
    write_entries([Entry("1-1", encode(by_row), orjson.loads(encode(by_row)))])
    batch_row, python_row = (Invocation.objects.get(call_id=row["call_id"]) for row in (by_batch, by_row))
    # Times may differ by a microsecond: a Unix time of today held in a float is only good to
    # a quarter of one, and PostgreSQL and Python round that last step each their own way.
    times = ("started_at", "finished_at", "confirmed_at")
    for column in times:
        assert abs(getattr(batch_row, column) - getattr(python_row, column)).total_seconds() <= 1e-6
    assert _columns(batch_row, times) == _columns(python_row, times)
    assert batch_row.arguments == fields["arguments"] and batch_row.started_at.timestamp() == pytest.approx(
        by_batch["started_at"], abs=2e-6
    )
    assert (writer.written, writer.quarantined) == (1, 0)


def test_an_older_process_rows_get_the_later_columns_defaults(acme, _empty_journal):
    row = _row(acme, outcome=Outcome.COMPLETED)
    for column in LATER_COLUMNS:
        del row[column]
    _empty_journal.xadd(JOURNAL_KEY, {ROW_FIELD: orjson.dumps(row)})
    _writer().step()
    written = Invocation.objects.get(call_id=row["call_id"])
    assert {column: getattr(written, column) for column in LATER_COLUMNS} == LATER_COLUMNS


def test_an_entry_that_is_no_row_is_quarantined_not_written_with_blanks(acme, _empty_journal):
    good = _row(acme, outcome=Outcome.COMPLETED)
    lacking = _row(acme, outcome=Outcome.COMPLETED)
    del lacking["call_id"]  # a nullable column: the database alone would take it
    journal.append_now(good)
    _empty_journal.xadd(JOURNAL_KEY, {ROW_FIELD: orjson.dumps(lacking)})
    _empty_journal.xadd(JOURNAL_KEY, {ROW_FIELD: b"[1, 2]"})
    writer = _writer()
    writer.step()
    assert list(Invocation.objects.filter(tenant=acme).values_list("call_id", flat=True)) == [good["call_id"]]
    assert QuarantinedInvocation.objects.count() == 2
    assert (writer.written, writer.quarantined) == (1, 2)
    assert _empty_journal.xpending(JOURNAL_KEY, GROUP)["pending"] == 0


@override_settings(AUDIT_JOURNAL_MAX_ROWS=3)
def test_a_full_journal_drops_new_rows_and_counts_them(acme, _empty_journal, caplog):
    from mcp_platform.metrics import AUDIT_ROWS_DROPPED

    own = Journal()
    dropped_before = AUDIT_ROWS_DROPPED._value.get()

    async def append(count: int) -> None:
        for _ in range(count):
            await own.append(_row(acme, outcome=Outcome.COMPLETED))
        await async_redis().aclose()

    async_to_sync(append)(6)
    # The first append read the length (0); the backlog is checked once a second after that.
    assert _empty_journal.xlen(JOURNAL_KEY) == 6
    own._gate.checked_at = 0.0  # a second later
    async_to_sync(append)(3)
    # That append saw 7 rows (>= 3): the next ones are dropped, counted and logged.
    assert _empty_journal.xlen(JOURNAL_KEY) == 7
    assert AUDIT_ROWS_DROPPED._value.get() - dropped_before == 2
    assert "is the audit writer running?" in caplog.text
    # A writer drains it; the next check lets rows in again.
    _writer().step()
    own._gate.checked_at = 0.0
    async_to_sync(append)(2)
    assert _empty_journal.xlen(JOURNAL_KEY) == 2


def test_rows_with_text_utf8_cannot_carry_still_encode(acme):
    # A lone surrogate (which a tool's text may hold) becomes U+FFFD: UTF-8 has no encoding for it.
    row = _row(acme, outcome=Outcome.COMPLETED, arguments={"text": "snow ☃ and a lone \udc80"})
    assert orjson.loads(encode(row))["arguments"] == {"text": "snow ☃ and a lone \ufffd"}
    assert encode(_row(acme, outcome=Outcome.COMPLETED, arguments={"text": "snow ☃"})).decode().count("☃") == 1


def test_call_ids_are_unique_in_a_process_and_in_its_forks():
    import os

    from audit.journal import new_call_id

    ids = {new_call_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(len(i) == 24 for i in ids)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked worker draws its own ids
        os.write(write, new_call_id().encode())
        os._exit(0)
    os.waitpid(child, 0)
    forked = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert forked not in ids and forked[:16] != next(iter(ids))[:16]
