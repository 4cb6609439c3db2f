"""MCP sessions, kept in Redis so any server process can serve any session."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis

from mcp_platform.mcp import names


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

    def dump(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def load(cls, raw: bytes | str) -> Session:
        return cls(**json.loads(raw))


def new_session_id() -> str:
    # 256 random bits, URL-safe base64: visible ASCII only, as the transport requires.
    return secrets.token_urlsafe(32)


class SessionStore:
    def __init__(self, redis: Redis, *, idle_seconds: int) -> None:
        self._redis = redis
        self._idle = idle_seconds

    async def create(self, session: Session) -> None:
        await self._redis.set(names.session_key(session.id), session.dump(), ex=self._idle)

    async def get(self, session_id: str) -> Session | None:
        """The session, its idle timer renewed; None when unknown, expired or deleted."""
        if not session_id or len(session_id) > 128:
            return None
        raw = await self._redis.getex(names.session_key(session_id), ex=self._idle)
        return Session.load(raw) if raw is not None else None

    async def save(self, session: Session) -> None:
        await self._redis.set(names.session_key(session.id), session.dump(), ex=self._idle)

    async def delete(self, session_id: str) -> bool:
        return bool(await self._redis.delete(names.session_key(session_id)))
