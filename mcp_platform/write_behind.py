"""Rows written behind: a Redis stream drained into the database by a consumer group.

The call path appends a row's state to a Redis stream (invocation rows, background runs'
changes) and goes on; ``StreamWriter`` is the loop that moves them into the database. Every
writer of a stream is a member of one consumer group: it reads a batch, writes it in one
transaction (the subclass's ``write``), and only then acknowledges and deletes the entries.
A writer killed at any point leaves its entries pending; another (or this one, restarted)
claims them once they have been idle ``claim_idle_seconds`` and writes them again, so the
subclass's write must be idempotent. A database that cannot be reached is retried after a
pause with nothing acknowledged: the writer tries the batch in hand again and takes no other
entry until it is written, so an outage leaves at most one batch pending with each writer.

``manage.py audit_writer`` runs the invocation journal's writer and, each on a thread of
its own, every loop an app registers here when Django starts (background runs:
``tools_app.runs.writer``), so the one process every deployment already runs drains every
stream.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any, cast

import redis

log = logging.getLogger(__name__)

Loop = Callable[[Callable[[], bool]], None]  # runs until the callable says stop
Entries = list[tuple[bytes, dict[bytes, bytes]]]

CLAIM_EVERY_SECONDS = 5.0
RETRY_PAUSE_SECONDS = 2.0
# Every writer that ever ran left its name in the group (a host and process id each, so one
# more per restart). A name with nothing pending that has not read for this long is a writer
# gone: it is removed, checked every FORGET_EVERY_SECONDS.
GONE_AFTER_SECONDS = 3600.0
FORGET_EVERY_SECONDS = 60.0
# Removes a consumer only while it holds no entry: removing one that does would drop its
# entries from the pending list, where no other writer could claim them.
_FORGET_IF_EMPTY = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) == 0 then
  return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
end
return -1
"""

_loops: dict[str, Loop] = {}


def register(name: str, loop: Loop) -> None:
    _loops[name] = loop


def registered() -> dict[str, Loop]:
    return dict(_loops)


class DatabaseUnavailable(Exception):
    """Retry the batch later, acknowledge nothing."""


class StreamWriter:
    """One member of ``group`` on ``stream``; subclasses say how a batch is written."""

    stream: str
    group: str
    label: str  # how its log lines name it

    def __init__(
        self,
        client: redis.Redis,
        *,
        batch_rows: int,
        claim_idle_seconds: float,
        block_ms: int = 1000,
        linger_seconds: float = 0.0,
        name: str | None = None,
        gone_after_seconds: float = GONE_AFTER_SECONDS,
    ) -> None:
        """``linger_seconds``: after a batch smaller than ``batch_rows``, wait this long before
        reading again, so entries arriving at a steady rate go in fewer, larger transactions
        (a transaction costs far more than a row)."""
        self._redis = client
        self._batch_rows = batch_rows
        self._claim_idle_ms = int(claim_idle_seconds * 1000)
        self._block_ms = block_ms
        self._linger = linger_seconds
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self._claimed_at = 0.0
        self._gone_after_ms = int(gone_after_seconds * 1000)
        self._forgot_at = 0.0
        self._forget_if_empty = client.register_script(_FORGET_IF_EMPTY)
        self._unwritten: Entries = []  # the batch the database was away for: next, before any other

    def write(self, entries: Entries) -> None:
        """Write the entries to the database (idempotently: they may come again); raise
        ``DatabaseUnavailable`` to have the batch tried again later."""
        raise NotImplementedError

    def acknowledged(self, entries: Entries) -> None:
        """After ``entries`` were written and acknowledged."""

    def ensure_group(self) -> None:
        try:
            # From the stream's start: entries appended before any writer existed are written too.
            self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def run(self, should_stop: Callable[[], bool]) -> None:
        self.ensure_group()
        while not should_stop():
            try:
                self.step()
            except DatabaseUnavailable as exc:
                log.error("%s: database unavailable (%s); retrying in %gs", self.label, exc, RETRY_PAUSE_SECONDS)
                time.sleep(RETRY_PAUSE_SECONDS)
            except redis.ConnectionError as exc:
                log.error("%s: Redis unavailable (%s); retrying in %gs", self.label, exc, RETRY_PAUSE_SECONDS)
                time.sleep(RETRY_PAUSE_SECONDS)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self.ensure_group()  # the stream was deleted (e.g. Redis restarted empty)

    def step(self) -> int:
        """One round: entries abandoned by dead writers, then new ones. Returns entries handled.

        After a batch the database was away for, only that batch again. Taking new entries on
        every retry instead moved the journal into the writers' pending lists during an outage
        (another batch each ``RETRY_PAUSE_SECONDS``), and once the database was back those
        came out one claim round (``batch_rows``) per ``CLAIM_EVERY_SECONDS`` at most: minutes
        of rows missing from the database after an outage of minutes
        (tests/audit/test_journal_writers_race.py, the database cut off)."""
        if self._unwritten:
            entries, self._unwritten = self._unwritten, []
            return self._handle(entries)
        handled = 0
        now = time.monotonic()
        if now - self._claimed_at >= CLAIM_EVERY_SECONDS:
            self._claimed_at = now
            handled += self._handle(self._claim())
        if now - self._forgot_at >= FORGET_EVERY_SECONDS:
            self._forgot_at = now
            self.forget_gone_writers()
        batches = self._redis.xreadgroup(
            self.group, self.name, {self.stream: ">"}, count=self._batch_rows, block=self._block_ms
        )
        read = 0
        for _, entries in cast(list[tuple[bytes, Entries]], batches or []):
            read += len(entries)
            handled += self._handle(entries)
        if 0 < read < self._batch_rows and self._linger:
            time.sleep(self._linger)  # let the next batch gather (the entries are safe in the stream)
        return handled

    def forget_gone_writers(self) -> list[str]:
        """Remove the names of writers gone (idle past ``gone_after_seconds``, nothing
        pending) from the group; returns them."""
        forgotten = []
        for consumer in self._redis.xinfo_consumers(self.stream, self.group):
            name = consumer["name"].decode() if isinstance(consumer["name"], bytes) else consumer["name"]
            gone = name != self.name and consumer["pending"] == 0 and consumer["idle"] >= self._gone_after_ms
            if gone and self._forget_if_empty(keys=[self.stream], args=[self.group, name]) != -1:
                forgotten.append(name)
        return forgotten

    def _claim(self) -> Entries:
        """Entries another writer took but did not acknowledge within the idle time (it died),
        and this writer's own (an earlier round that failed before acknowledging)."""
        own = cast(
            list[tuple[bytes, Entries]],
            self._redis.xreadgroup(self.group, self.name, {self.stream: "0"}, count=self._batch_rows),
        )
        entries: Entries = [entry for _, batch in own for entry in batch]
        answer: list[Any] = self._redis.xautoclaim(
            self.stream,
            self.group,
            self.name,
            min_idle_time=self._claim_idle_ms,
            start_id="0-0",
            count=self._batch_rows,
        )
        entries.extend(answer[1])
        return entries

    def _handle(self, entries: Entries) -> int:
        if not entries:
            return 0
        try:
            self.write(entries)
        except DatabaseUnavailable:
            self._unwritten = entries
            raise
        ids = [entry_id for entry_id, _ in entries]
        pipe = self._redis.pipeline(transaction=False)
        pipe.xack(self.stream, self.group, *ids)
        pipe.xdel(self.stream, *ids)
        pipe.execute()
        self.acknowledged(entries)
        return len(entries)
