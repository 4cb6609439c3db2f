"""Attack: several audit writers on one journal, as production runs them (``manage.py
audit_writer`` processes, members of one consumer group), while rows pour in.

Every journaled row must become exactly one ``Invocation`` row and every entry must end
acknowledged: with three writers racing for batches, with the database cut off under them,
and with one SIGKILLed in the middle of its batch's transaction. Real Redis, real
PostgreSQL, real processes; the producer appends in pipelines of ``CHUNK`` rows, as the
servers' end-of-call batches do.

The writers start once for the module (a process costs seconds of CPU to start) and reach
PostgreSQL through ``DatabaseLine``, a TCP proxy the outage test cuts; a test that needs
more writers than are alive starts the missing ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count

from audit.journal import JOURNAL_KEY, ROW_FIELD, encode, invocation_row
from audit.models import Invocation
from audit.writer import GROUP, invocation_from_row
from tenants.models import Tenant
from tests.mcp.live import LiveWriter, database_url, journal_drained, start_audit_writer, stop_together
from tests.poll import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS = 3
CHUNK = 100
# Small batches: many transactions in flight at once, the race is fought often.
BATCH_ROWS = 100
WRITER_ENV = {
    "AUDIT_WRITER_BATCH_ROWS": str(BATCH_ROWS),
    "AUDIT_WRITER_LINGER_MS": "20",
    # A killed writer's batch is taken over soon; a live one's (a batch takes milliseconds) is not.
    "AUDIT_WRITER_CLAIM_IDLE_SECONDS": "2",
}
UNAVAILABLE = b"audit writer: database unavailable"


class DatabaseLine:
    """A TCP proxy between the writers and PostgreSQL that a test can cut: ``cut()`` drops
    every connection through it and refuses new ones (the database's host is gone),
    ``restore()`` listens on the same port again."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="database-line", daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> DatabaseLine:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def cut(self) -> None:
        self._call(self._cut())

    def restore(self) -> None:
        self._call(self._listen())

    def _call(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for end in self._links:
            end.transport.abort()
        self._links.clear()

    async def _link(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            reader, writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        ends = {client_writer, writer}
        self._links |= ends
        pumps = {
            asyncio.ensure_future(_pump(client_reader, writer)),
            asyncio.ensure_future(_pump(reader, client_writer)),
        }
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)  # either side hung up
        for pump in pumps:
            pump.cancel()
        for end in ends:
            end.transport.abort()
        self._links -= ends


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()


@dataclass
class Pool:
    """The module's writers, all through one ``DatabaseLine``."""

    tmp_path: Path
    line: DatabaseLine
    client: redis.Redis
    writers: list[LiveWriter] = field(default_factory=list)

    def alive(self) -> list[LiveWriter]:
        """``WRITERS`` running writers, each in the group: the dead are replaced."""
        self.writers = [writer for writer in self.writers if writer.process.poll() is None]
        env = {**WRITER_ENV, "DATABASE_URL": database_url(port=self.line.port)}
        self.writers += [
            start_audit_writer(self.tmp_path, f"writer-{time.monotonic_ns()}", env)
            for _ in range(WRITERS - len(self.writers))
        ]

        def joined() -> bool:
            self.check()
            return all(consumer(writer) in self.consumers() for writer in self.writers)

        wait_for(joined, timeout=60, message="every writer to join the consumer group")
        return list(self.writers)

    def check(self) -> None:
        """Fail when a writer exited on its own (``kill`` takes one out of the pool)."""
        for writer in self.writers:
            if writer.process.poll() is not None:
                raise AssertionError(f"{writer.log_path.name} exited:\n{writer.log_path.read_text()}")

    def kill(self, writer: LiveWriter) -> None:
        """SIGKILL: no handler runs, nothing in hand is written or acknowledged."""
        self.writers.remove(writer)
        os.kill(writer.process.pid, signal.SIGKILL)
        writer.process.wait()

    def consumers(self) -> dict[str, dict[str, Any]]:
        try:
            return {info["name"].decode(): info for info in self.client.xinfo_consumers(JOURNAL_KEY, GROUP)}
        except redis.ResponseError:  # no stream or no group yet
            return {}

    def drained(self) -> bool:
        self.check()
        return journal_drained()


@pytest.fixture(scope="module")
def pool(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(JOURNAL_KEY)
    db = connection.settings_dict
    with DatabaseLine(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as line:
        writers = Pool(tmp_path_factory.mktemp("journal-writers"), line, client)
        yield writers
        stop_together([writer.process for writer in writers.writers], grace=10)
    client.delete(JOURNAL_KEY)
    client.close()


@pytest.fixture
def writers(pool: Pool) -> Iterator[list[LiveWriter]]:
    alive = pool.alive()
    yield alive
    # The next test's rows must not meet this one's (its tenant is gone after the flush).
    wait_for(pool.drained, timeout=60, message="the journal to drain after the test")


def consumer(writer: LiveWriter) -> str:
    """The writer's name in the consumer group (``StreamWriter``'s default: host and pid)."""
    return f"{socket.gethostname()}:{writer.process.pid}"


def _row(tenant: Tenant, text: str) -> dict[str, Any]:
    return invocation_row(
        tenant_id=tenant.pk,
        key_id=None,
        key_label="race",
        tool_name="echo",
        outcome="completed",
        started_at=time.time(),
        arguments={"text": text},
        duration_ms=1.0,
    )


def _produce(
    client: redis.Redis, tenant: Tenant, count: int, label: str, holders: set[str] | None = None, at_once: bool = False
) -> list[str]:
    """Append ``count`` rows in pipelines of ``CHUNK``; their call ids. ``holders`` collects
    the writers seen holding entries (read, not yet acknowledged) between pipelines.
    ``at_once``: in one transaction instead, so that each waiting writer takes a full batch
    (a pipeline's first row wakes them, and each would take one row)."""
    call_ids = []
    chunk = count if at_once else CHUNK
    for start in range(0, count, chunk):
        pipe = client.pipeline(transaction=at_once)
        for n in range(start, min(start + chunk, count)):
            row = _row(tenant, f"{label}-{n}")
            call_ids.append(row["call_id"])
            pipe.xadd(JOURNAL_KEY, {ROW_FIELD: encode(row)})
        pipe.execute()
        if holders is not None:
            holders.update(held["name"].decode() for held in client.xpending(JOURNAL_KEY, GROUP)["consumers"])
    return call_ids


def _assert_each_once(tenant: Tenant, call_ids: list[str]) -> None:
    rows = dict(
        Invocation.objects.filter(tenant=tenant).values("call_id").annotate(n=Count("id")).values_list("call_id", "n")
    )
    missing = set(call_ids) - set(rows)
    doubled = {call_id: n for call_id, n in rows.items() if n > 1}
    strangers = set(rows) - set(call_ids)
    assert (len(missing), len(doubled), len(strangers)) == (0, 0, 0), (missing, doubled, strangers)
    assert len(call_ids) == len(set(call_ids)) == sum(rows.values())


def _pending_ids(client: redis.Redis) -> set[bytes]:
    return {entry["message_id"] for entry in client.xpending_range(JOURNAL_KEY, GROUP, min="-", max="+", count=100_000)}


def _settled(client: redis.Redis) -> None:
    assert client.xlen(JOURNAL_KEY) == 0
    assert client.xpending(JOURNAL_KEY, GROUP)["pending"] == 0


def test_three_writers_race_for_one_journal_and_write_each_row_once(acme, pool, writers):
    """6,000 rows appended in pipelines while three writers take batches of them at once."""
    holders: set[str] = set()
    began = time.monotonic()
    call_ids = _produce(pool.client, acme, 6000, "race", holders)
    produced = time.monotonic() - began
    wait_for(pool.drained, timeout=60, message="the journal to drain")
    drained = time.monotonic() - began
    print(f"6000 rows appended in {produced:.2f} s, all written in {drained:.2f} s; held by {len(holders)} writers")
    _assert_each_once(acme, call_ids)
    _settled(pool.client)
    assert len(holders & {consumer(writer) for writer in writers}) >= 2, f"no race: held only by {holders}"


def test_the_database_cut_off_under_the_writers_loses_no_row(acme, pool, writers):
    """Each writer keeps the one batch it could not write and takes no other until the
    database is back: the entries held unacknowledged stop growing while it is away."""
    call_ids = _produce(pool.client, acme, 1000, "before")
    wait_for(pool.drained, timeout=60, message="the first rows written")
    logs = {writer.log_path: writer.log_path.stat().st_size for writer in writers}

    def each_failed(times: int) -> Callable[[], bool]:
        def failed() -> bool:
            pool.check()
            return all(path.read_bytes()[start:].count(UNAVAILABLE) >= times for path, start in logs.items())

        return failed

    pool.line.cut()
    try:
        call_ids += _produce(pool.client, acme, 2000, "during", at_once=True)
        wait_for(each_failed(1), timeout=30, message="every writer to find the database gone")
        held = _pending_ids(pool.client)
        wait_for(each_failed(3), timeout=30, message="every writer to try twice more")
        later = _pending_ids(pool.client)
        assert later == held, f"held {len(held)} entries after a failure each, {len(later)} after three"
        assert 0 < len(held) <= WRITERS * 2 * BATCH_ROWS  # a batch each (a claim round's: two)
        assert pool.client.xlen(JOURNAL_KEY) == 2000  # nothing acknowledged
    finally:
        pool.line.restore()
    began = time.monotonic()
    call_ids += _produce(pool.client, acme, 1000, "after")
    wait_for(pool.drained, timeout=60, message="the journal to drain once the database is back")
    print(f"{len(held)} of 2000 entries held in the outage; all written {time.monotonic() - began:.2f} s after it")
    _assert_each_once(acme, call_ids)
    _settled(pool.client)


def test_a_writer_killed_in_its_batchs_transaction_leaves_it_to_a_survivor(acme, pool, writers):
    """The trap: the test holds an uncommitted row with the call id of one journaled row, so
    the writer that takes that row's batch blocks in its INSERT (``ON CONFLICT`` waits for the
    test's transaction) with the whole batch read, copied and not acknowledged. That writer
    is SIGKILLed there while the others go on writing; then the trap is released."""
    client = pool.client
    call_ids = _produce(client, acme, 2000, "before")
    trap = _row(acme, "trap")
    with transaction.atomic():
        invocation_from_row(trap).save()  # uncommitted: a concurrent insert of its call id waits
        trap_id = client.xadd(JOURNAL_KEY, {ROW_FIELD: encode(trap)})
        call_ids.append(trap["call_id"])

        def trap_owner() -> str:
            pending = client.xpending_range(JOURNAL_KEY, GROUP, min=trap_id, max=trap_id, count=1)
            return pending[0]["consumer"].decode() if pending else ""

        owner = wait_for(trap_owner, message="a writer to take the trapped row")
        victim = next(writer for writer in writers if consumer(writer) == owner)
        pool.kill(victim)
        held = client.xpending_range(JOURNAL_KEY, GROUP, min="-", max="+", count=10_000, consumername=owner)
        held_ids = [entry["message_id"] for entry in held]
        assert trap_id in held_ids
        pipe = client.pipeline(transaction=False)
        for entry_id in held_ids:
            pipe.xrange(JOURNAL_KEY, min=entry_id, max=entry_id)
        held_calls = [orjson.loads(fields[ROW_FIELD])["call_id"] for ((_, fields),) in pipe.execute()]
        # The survivors write on while the dead writer's batch waits to be claimed.
        call_ids += _produce(client, acme, 2000, "after")
        transaction.set_rollback(True)  # the trap goes: the journal's row is the one to keep
    began = time.monotonic()
    wait_for(pool.drained, timeout=60, message="the survivors to claim and write the dead writer's batch")
    print(f"killed {owner} holding {len(held_ids)} entries; all written {time.monotonic() - began:.2f} s later")
    _assert_each_once(acme, call_ids)
    assert Invocation.objects.filter(call_id__in=held_calls).count() == len(held_ids)
    # Nothing the dead writer held is left with it: a survivor took each entry over.
    assert pool.consumers()[owner]["pending"] == 0
    _settled(client)
