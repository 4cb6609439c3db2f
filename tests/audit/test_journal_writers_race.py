"""Attack: several audit writers on one journal, as production runs them (``manage.py
audit_writer`` processes, members of one consumer group), while rows pour in.

Every journaled row must become exactly one ``Invocation`` row and every entry must end
acknowledged: with three writers racing for batches, with the database cut off under them,
and with one SIGKILLed in the middle of its batch's transaction. Real Redis, real
PostgreSQL, real processes; the producer appends in pipelines of ``CHUNK`` rows, as the
servers' end-of-call batches do.

The writers start once for the module (a process costs seconds of CPU to start) and reach
PostgreSQL through one ``Line`` (a TCP proxy a test can cut), Redis each through a line of
its own; a test that needs more writers than are alive starts the missing ones.
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
from urllib.parse import urlsplit

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


class Line:
    """A TCP proxy between writers and PostgreSQL or Redis that a test can cut: ``cut()``
    drops every connection through it and refuses new ones (the host is gone), ``restore()``
    listens on the same port again."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="line", daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> Line:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> Line:
        self._thread.start()
        self.restore()
        return self

    def close(self) -> None:
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
    """The module's writers, all through one ``Line`` to PostgreSQL, each through its own to Redis."""

    tmp_path: Path
    line: Line
    client: redis.Redis
    writers: list[LiveWriter] = field(default_factory=list)
    redis_lines: dict[Path, Line] = field(default_factory=dict)  # by the writer's log

    def alive(self) -> list[LiveWriter]:
        """``WRITERS`` running writers, each in the group: the dead are replaced."""
        self.writers = [writer for writer in self.writers if writer.process.poll() is None]
        while len(self.writers) < WRITERS:
            redis_at = urlsplit(settings.REDIS_URL)
            line = Line(redis_at.hostname or "127.0.0.1", redis_at.port or 6379).open()
            env = {
                **WRITER_ENV,
                "DATABASE_URL": database_url(port=self.line.port),
                "REDIS_URL": redis_at._replace(netloc=f"127.0.0.1:{line.port}").geturl(),
            }
            writer = start_audit_writer(self.tmp_path, f"writer-{time.monotonic_ns()}", env)
            self.writers.append(writer)
            self.redis_lines[writer.log_path] = line

        def joined() -> bool:
            self.check()
            return all(consumer(writer) in self.consumers() for writer in self.writers)

        wait_for(joined, timeout=60, message="every writer to join the consumer group")
        return list(self.writers)

    def redis_line(self, writer: LiveWriter) -> Line:
        return self.redis_lines[writer.log_path]

    def close(self) -> None:
        stop_together([writer.process for writer in self.writers], grace=10)
        for line in self.redis_lines.values():
            line.close()

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
    with Line(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as line:
        writers = Pool(tmp_path_factory.mktemp("journal-writers"), line, client)
        try:
            yield writers
        finally:
            writers.close()
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


@dataclass
class Trap:
    call_id: str
    entry_id: bytes
    taker: LiveWriter  # the writer blocked on it
    name: str  # the taker's name in the group


@contextlib.contextmanager
def _trap(client: redis.Redis, tenant: Tenant, writers: list[LiveWriter]) -> Iterator[Trap]:
    """The test holds an uncommitted row with the call id of a row it journals, so the writer
    that takes that row's batch blocks in its INSERT (``ON CONFLICT`` waits for the test's
    transaction) with the whole batch read, copied and not acknowledged. Yields once a writer
    is blocked there; leaving rolls the test's row back, and the INSERT goes on."""
    row = _row(tenant, "trap")
    with transaction.atomic():
        invocation_from_row(row).save()
        entry_id = client.xadd(JOURNAL_KEY, {ROW_FIELD: encode(row)})
        name = wait_for(lambda: _taker(client, entry_id), message="a writer to take the trapped row")
        yield Trap(row["call_id"], entry_id, next(writer for writer in writers if consumer(writer) == name), name)
        transaction.set_rollback(True)  # the journal's row is the one to keep


def _taker(client: redis.Redis, entry_id: bytes) -> str:
    """The writer holding the entry (it read the entry and has not acknowledged it), or ''."""
    pending = client.xpending_range(JOURNAL_KEY, GROUP, min=entry_id, max=entry_id, count=1)
    return pending[0]["consumer"].decode() if pending else ""


def _held_by(client: redis.Redis, name: str) -> tuple[list[bytes], list[str]]:
    """The entries a writer holds, and the call ids of their rows."""
    held = client.xpending_range(JOURNAL_KEY, GROUP, min="-", max="+", count=100_000, consumername=name)
    ids = [entry["message_id"] for entry in held]
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xrange(JOURNAL_KEY, min=entry_id, max=entry_id)
    return ids, [orjson.loads(fields[ROW_FIELD])["call_id"] for ((_, fields),) in pipe.execute()]


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
    """The writer blocked on a trap (``_trap``) is SIGKILLed there, inside its batch's
    transaction, while the others go on writing; then the trap is released."""
    client = pool.client
    call_ids = _produce(client, acme, 2000, "before")
    with _trap(client, acme, writers) as trap:
        call_ids.append(trap.call_id)
        pool.kill(trap.taker)
        held_ids, held_calls = _held_by(client, trap.name)
        assert trap.entry_id in held_ids
        # The survivors write on while the dead writer's batch waits to be claimed.
        call_ids += _produce(client, acme, 2000, "after")
    began = time.monotonic()
    wait_for(pool.drained, timeout=60, message="the survivors to claim and write the dead writer's batch")
    print(f"killed {trap.name} holding {len(held_ids)} entries; all written {time.monotonic() - began:.2f} s later")
    _assert_each_once(acme, call_ids)
    assert Invocation.objects.filter(call_id__in=held_calls).count() == len(held_ids)
    # Nothing the dead writer held is left with it: a survivor took each entry over.
    assert pool.consumers()[trap.name]["pending"] == 0
    _settled(client)


def test_a_writer_killed_between_its_commit_and_its_acknowledgement_leaves_no_row_twice(acme, pool, writers):
    """Committed, not acknowledged: the writer blocked on a trap (``_trap``) loses its Redis
    there, so once the trap goes it commits its batch and cannot acknowledge it; it is
    SIGKILLed then. A survivor claims the batch and writes it again, and every row of it,
    already there, is skipped (``ON CONFLICT (call_id) DO NOTHING``)."""
    client = pool.client
    call_ids = _produce(client, acme, 2000, "before")
    with _trap(client, acme, writers) as trap:
        call_ids.append(trap.call_id)
        seen = trap.taker.log_path.stat().st_size
        pool.redis_line(trap.taker).cut()
        held_ids, held_calls = _held_by(client, trap.name)
        assert trap.entry_id in held_ids

    def acknowledgement_failed() -> bool:
        pool.check()
        return b"audit writer: Redis unavailable" in trap.taker.log_path.read_bytes()[seen:]

    # Its first Redis command after the trap went is the acknowledgement, after the commit.
    wait_for(acknowledgement_failed, message="the trapped writer to commit its batch and fail to acknowledge it")
    assert Invocation.objects.filter(call_id__in=held_calls).count() == len(held_calls)
    pool.kill(trap.taker)
    call_ids += _produce(client, acme, 2000, "after")
    began = time.monotonic()
    wait_for(pool.drained, timeout=60, message="the survivors to claim the dead writer's committed batch")
    print(
        f"killed {trap.name} after it committed {len(held_ids)} entries; settled {time.monotonic() - began:.2f} s later"
    )
    _assert_each_once(acme, call_ids)
    assert pool.consumers()[trap.name]["pending"] == 0
    _settled(client)
