"""MCP sessions, kept in Redis so any server process can serve any session."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from mcp_platform.mcp import names
from mcp_platform.redis_batch import CommandBatch, checked, ignore_reply


@dataclass
class Session:
    id: str
    subject: str  # the credential it is bound to; a session id is never a credential itself
    tenant_id: int
    protocol_version: str
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str = "info"
    created_at: float = field(default_factory=time.time)
    initialized: bool = False
    credential: str = ""  # a label for operators (key name and prefix), never the key

    def dump(self) -> bytes:
        # Field by field: dataclasses.asdict deep-copies every value first.
        return orjson.dumps({name: getattr(self, name) for name in _FIELDS})

    @classmethod
    def load(cls, raw: bytes | str) -> Session:
        return cls(**orjson.loads(raw))


_FIELDS = tuple(item.name for item in fields(Session))
# Releases a session's GET-stream lock only while this holder still has it.
_RELEASE_IF_HELD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
# Renews the lock only for its holder: a stream whose lock lapsed and went to another stream
# must not keep that stream's lock alive (and learns that it lost its own).
_RENEW_IF_HELD = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('EXPIRE', KEYS[1], ARGV[2]) end return 0"
)


def new_session_id() -> str:
    # 256 random bits, URL-safe base64: visible ASCII only, as the transport requires.
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class LiveSession:
    session: Session
    last_seen: float
    stream_holder: str | None  # "<host>:<pid>:…" of the process holding its GET stream


# Last-seen times are for operators, so they are written at most this often per session.
TOUCH_INTERVAL_SECONDS = 30.0
# A session's resources/subscribe set is bounded, so one client cannot grow Redis without end.
MAX_SUBSCRIPTIONS = 1000


class SessionLookup:
    """A session read in flight (``SessionStore.lookup``)."""

    def __init__(self, answer: asyncio.Future[list[Any]] | None) -> None:
        self._answer = answer
        if answer is not None:
            # A request refused before it looks at its session never reads the answer.
            answer.add_done_callback(ignore_reply)

    async def session(self) -> Session | None:
        """The session; None when unknown, expired or deleted."""
        if self._answer is None:
            return None
        answer, self._answer = self._answer, None  # read once; a long stream keeps no reply around
        (raw,) = await answer
        if isinstance(raw, Exception):
            raise raw
        return Session.load(raw) if raw is not None else None


class SessionStore:
    def __init__(self, redis: Redis, batch: CommandBatch, *, idle_seconds: int) -> None:
        self._redis = redis
        # Lookups on the request path go out with the other requests' commands of the same turn.
        self._batch = batch
        self.idle_seconds = idle_seconds
        self._touched: dict[str, float] = {}

    def _index_commands(self, session: Session) -> list[tuple[Any, ...]]:
        """Record the session in its tenant's index, and keep the index bounded as it is written:
        entries not seen for longer than a session can idle are gone sessions (pruned), and an
        index nobody writes to expires with its last session."""
        now = time.time()
        index = names.tenant_sessions_key(session.tenant_id)
        # A session's idle timer is renewed on every request, its score at most every
        # TOUCH_INTERVAL_SECONDS: that much older is still alive.
        horizon = self.idle_seconds + TOUCH_INTERVAL_SECONDS
        return [
            ("ZADD", index, now, session.id),
            ("ZREMRANGEBYSCORE", index, "-inf", f"({now - horizon}"),
            ("EXPIRE", index, int(horizon) + 1),
        ]

    async def create(self, session: Session) -> None:
        checked(
            await self._batch.run(
                [
                    ("SET", names.session_key(session.id), session.dump(), "EX", self.idle_seconds),
                    *self._index_commands(session),
                ]
            )
        )

    def touch_due(self, session: Session) -> bool:
        """Whether to record activity now (at most every TOUCH_INTERVAL_SECONDS per session);
        checked in memory, so most requests schedule no write at all."""
        now = time.monotonic()
        if now - self._touched.get(session.id, 0.0) < TOUCH_INTERVAL_SECONDS:
            return False
        if len(self._touched) > 100_000:
            self._touched.clear()
        # Interned: the session's open GET stream holds the same string (StandaloneStream).
        self._touched[sys.intern(session.id)] = now
        return True

    async def touch(self, session: Session) -> None:
        """Record activity for the live sessions view (see ``touch_due``); the session's
        subscriptions live as long as the session does. With the request path's commands."""
        await self._batch.run(
            [*self._index_commands(session), ("EXPIRE", names.subscriptions_key(session.id), self.idle_seconds)]
        )

    async def swap_digests(self, digests: list[tuple[str, str]]) -> list[bytes | None]:
        """Remember the list fingerprints each session was told about (session id,
        fingerprint); what each had before (None: nothing yet). One round trip."""
        commands = [
            ("SET", names.session_digest_key(session_id), digest, "EX", self.idle_seconds, "GET")
            for session_id, digest in digests
        ]
        return cast(list[bytes | None], checked(await self._batch.run(commands)))

    async def subscribe(self, session: Session, uri: str) -> bool:
        """Add ``uri`` to the session's subscriptions; False when it holds MAX_SUBSCRIPTIONS already."""
        key = names.subscriptions_key(session.id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.scard(key)
        pipe.sismember(key, uri)
        count, present = await pipe.execute()
        if not present and count >= MAX_SUBSCRIPTIONS:
            return False
        pipe = self._redis.pipeline(transaction=False)
        pipe.sadd(key, uri)
        pipe.expire(key, self.idle_seconds)
        await pipe.execute()
        return True

    async def unsubscribe(self, session: Session, uri: str) -> None:
        await self._redis.srem(names.subscriptions_key(session.id), uri)

    async def subscribed(self, session_ids: list[str], uri: str) -> list[bool]:
        """For each session, whether it subscribed to ``uri`` (one pipeline)."""
        pipe = self._redis.pipeline(transaction=False)
        for session_id in session_ids:
            pipe.sismember(names.subscriptions_key(session_id), uri)
        return [bool(answer) for answer in await pipe.execute()]

    async def live(self, tenant_id: int) -> list[LiveSession]:
        """The tenant's sessions that still exist, most recently seen first."""
        index = names.tenant_sessions_key(tenant_id)
        # (member, score) pairs; members are bytes, our clients do not decode responses.
        entries = cast(list[tuple[bytes, float]], await self._redis.zrevrange(index, 0, 9999, withscores=True))
        if not entries:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for session_id, _ in entries:
            pipe.get(names.session_key(session_id.decode()))
            pipe.get(names.standalone_lock_key(session_id.decode()))
        values = cast(list[bytes | None], await pipe.execute())
        live: list[LiveSession] = []
        gone: list[bytes] = []
        for (session_id, score), raw, holder in zip(entries, values[::2], values[1::2], strict=True):
            if raw is None:
                gone.append(session_id)
                continue
            live.append(LiveSession(Session.load(raw), score, holder.decode() if holder else None))
        if gone:  # expired sessions leave the index lazily
            await self._redis.zrem(index, *gone)
        return live

    def lookup(self, session_id: str) -> SessionLookup:
        """Start reading the session (its idle timer renewed): the read goes out with this
        turn's other commands, e.g. while the caller's credential is being checked."""
        if not session_id or len(session_id) > 128:
            return SessionLookup(None)
        return SessionLookup(self._batch.run((("GETEX", names.session_key(session_id), "EX", self.idle_seconds),)))

    async def get(self, session_id: str) -> Session | None:
        """The session, its idle timer renewed; None when unknown, expired or deleted."""
        return await self.lookup(session_id).session()

    async def save(self, session: Session) -> None:
        await self._batch.one("SET", names.session_key(session.id), session.dump(), "EX", self.idle_seconds)

    async def delete(self, session_id: str, tenant_id: int) -> bool:
        deleted, _, _ = checked(
            await self._batch.run(
                [
                    ("DEL", names.session_key(session_id)),
                    ("ZREM", names.tenant_sessions_key(tenant_id), session_id),
                    ("DEL", names.subscriptions_key(session_id)),
                ]
            )
        )
        return bool(deleted)

    # --- the one GET stream a session may hold -------------------------------------------

    async def claim_stream(self, session_id: str, holder: str, *, seconds: int) -> bool:
        """Take the session's GET-stream lock for ``holder`` (for ``seconds``, renewed while
        the stream is open); False while another stream holds it."""
        taken = await self._batch.one("SET", names.standalone_lock_key(session_id), holder, "NX", "EX", seconds)
        return taken is not None

    async def renew_stream(self, session_id: str, holder: str, *, seconds: int) -> bool:
        """Renew the lock ``holder`` holds; False when it no longer holds it (it lapsed, and
        perhaps another stream took it)."""
        key = names.standalone_lock_key(session_id)
        return bool(await self._batch.one("EVAL", _RENEW_IF_HELD, 1, key, holder, seconds))

    async def release_stream(self, session_id: str, holder: str) -> None:
        await self._batch.one("EVAL", _RELEASE_IF_HELD, 1, names.standalone_lock_key(session_id), holder)
