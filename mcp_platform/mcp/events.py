"""The SSE event log: every event sent on a stream is kept in Redis for resumption.

One Redis stream per (session, stream). An event id is ``<stream id>.<entry id>``, so it
names its stream and is unique across the session. A client that reconnects with
``Last-Event-ID`` gets the later events of that stream only, from any server process,
and then follows it live until the stream's final event (its response).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from mcp_platform.mcp import names
from mcp_platform.redis_batch import CommandBatch, checked, hash_reply

_EVENT_ID = re.compile(r"^([A-Za-z0-9]{1,32})\.(\d{1,20}-\d{1,20})$")
# An event log is a replay buffer, not an archive: cap its length as well as its age.
MAX_EVENTS_PER_STREAM = 10_000

# What XRANGE gives our clients (decode_responses is off): (entry id, fields), all bytes.
# redis-py types it as bytes | str | None throughout, for every client configuration.
_Entries = list[tuple[bytes, dict[bytes, bytes]]]
_Batches = list[tuple[bytes, _Entries]]  # XREAD: (key, entries) per stream


@dataclass(frozen=True)
class StoredEvent:
    event_id: str
    data: bytes  # empty for a priming event
    final: bool  # the stream ends after this event


def parse_event_id(value: str) -> tuple[str, str] | None:
    """(stream id, entry id) of a Last-Event-ID we issued; None for anything else."""
    match = _EVENT_ID.match(value.strip())
    return (match.group(1), match.group(2)) if match else None


def _appended(key: str, data: bytes, final: bool, ttl: int) -> list[tuple[object, ...]]:
    return [
        ("XADD", key, "MAXLEN", "~", MAX_EVENTS_PER_STREAM, "*", "d", data, "f", b"1" if final else b"0"),
        ("EXPIRE", key, ttl),
    ]


def _stored(stream_id: str, raw: list[list[object]]) -> list[StoredEvent]:
    """XRANGE's raw reply ([entry id, [field, value, …]] each) as events."""
    events = []
    for entry_id, flat in raw:
        fields = hash_reply(flat)  # type: ignore[arg-type]
        events.append(
            StoredEvent(f"{stream_id}.{cast(bytes, entry_id).decode()}", fields[b"d"], fields.get(b"f") == b"1")
        )
    return events


class EventStore:
    def __init__(self, redis: Redis, batch: CommandBatch, *, ttl_seconds: int) -> None:
        """Appends and reads go out with this loop's other hot-path commands (``batch``);
        only ``follow``, which blocks, holds a connection of ``redis``'s pool."""
        self._redis = redis
        self._batch = batch
        self._ttl = ttl_seconds

    @property
    def ttl_seconds(self) -> int:
        return self._ttl

    async def run(self, commands: list[tuple[object, ...]]) -> list[object]:
        """Other commands about streams (their producers), with this loop's hot-path batch."""
        return checked(await self._batch.run(commands))

    def append_commands(
        self, session_id: str, stream_id: str, data: bytes, *, final: bool = False
    ) -> list[tuple[object, ...]]:
        """The commands of ``append``, for a caller that sends them itself."""
        return _appended(names.events_key(session_id, stream_id), data, final, self._ttl)

    async def append(self, session_id: str, stream_id: str, data: bytes, *, final: bool = False) -> str:
        entry_id, _ = checked(
            await self._batch.run(_appended(names.events_key(session_id, stream_id), data, final, self._ttl))
        )
        return f"{stream_id}.{cast(bytes, entry_id).decode()}"

    async def append_many(self, items: list[tuple[str, str, bytes]]) -> list[str]:
        """Append one event to each (session, stream) in a single round trip; their ids."""
        commands = [
            command
            for session_id, stream_id, data in items
            for command in _appended(names.events_key(session_id, stream_id), data, False, self._ttl)
        ]
        results = checked(await self._batch.run(commands))
        return [
            f"{stream_id}.{cast(bytes, entry).decode()}"
            for (_, stream_id, _), entry in zip(items, results[::2], strict=True)
        ]

    async def append_and_read(
        self, appends: list[tuple[str, str, bytes]], reads: list[tuple[str, str, str]]
    ) -> list[list[StoredEvent]]:
        """``append_many`` then ``after_many`` in one round trip: Redis runs a connection's
        commands in order, so each read sees the appends before it (a fan-out to a thousand
        sessions pays one wait for Redis, not two)."""
        commands = [
            command
            for session_id, stream_id, data in appends
            for command in _appended(names.events_key(session_id, stream_id), data, False, self._ttl)
        ]
        commands += [
            ("XRANGE", names.events_key(session_id, stream_id), f"({after_entry}", "+", "COUNT", 1000)
            for session_id, stream_id, after_entry in reads
        ]
        results = checked(await self._batch.run(commands))[len(appends) * 2 :]
        return [
            _stored(stream_id, cast(list[list[object]], rows))
            for (_, stream_id, _), rows in zip(reads, results, strict=True)
        ]

    async def after_many(self, items: list[tuple[str, str, str]]) -> list[list[StoredEvent]]:
        """``after`` for several (session, stream, after entry) at once, in one round trip."""
        commands = [
            ("XRANGE", names.events_key(session_id, stream_id), f"({after_entry}", "+", "COUNT", 1000)
            for session_id, stream_id, after_entry in items
        ]
        results = checked(await self._batch.run(commands))
        return [
            _stored(stream_id, cast(list[list[object]], rows))
            for (_, stream_id, _), rows in zip(items, results, strict=True)
        ]

    async def exists(self, session_id: str, stream_id: str) -> bool:
        return bool(await self._batch.one("EXISTS", names.events_key(session_id, stream_id)))

    async def after(self, session_id: str, stream_id: str, after_entry: str) -> list[StoredEvent]:
        """The events stored after ``after_entry`` (no waiting)."""
        (events,) = await self.after_many([(session_id, stream_id, after_entry)])
        return events

    async def follow(
        self,
        session_id: str,
        stream_id: str,
        after_entry: str,
        *,
        block_ms: int = 5000,
        watch: Callable[[], Awaitable[bool]] | None = None,
        watch_every: float = 2.0,
    ) -> AsyncIterator[StoredEvent]:
        """Events after ``after_entry``, then new ones as they arrive, until a final event.

        ``watch`` is awaited at least every ``watch_every`` seconds (also while events flow);
        it may end the stream (write its final event) and returns True to stop following
        without one (the follower's client is gone)."""
        key = names.events_key(session_id, stream_id)
        last = after_entry
        if last == "$":
            # Pin "now" to a concrete id; re-reading "$" on every loop would skip events
            # appended between two reads.
            newest = cast(_Entries, await self._redis.xrevrange(key, count=1))
            last = newest[0][0].decode() if newest else "0-0"
        if watch is not None:
            block_ms = min(block_ms, max(1, round(watch_every * 1000)))
        watched = time.monotonic()
        while True:
            batches = cast(_Batches | None, await self._redis.xread({key: last}, count=100, block=block_ms))
            for _, entries in batches or []:
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    event = StoredEvent(f"{stream_id}.{last}", fields[b"d"], fields.get(b"f") == b"1")
                    yield event
                    if event.final:
                        return
            if watch is not None and time.monotonic() - watched >= watch_every:
                watched = time.monotonic()
                if await watch():
                    return
