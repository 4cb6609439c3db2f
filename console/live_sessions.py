"""Operators' view of open MCP sessions: list them per tenant, end one.

Sessions live in Redis (see ``mcp_platform.mcp.sessions``); ending one deletes it (the
client's next request gets 404) and closes its GET stream on whichever process holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from mcp_platform.mcp import messages, names
from mcp_platform.mcp.sessions import LiveSession, SessionStore
from mcp_platform.redis_clients import async_redis, command_batch
from tenants.models import Tenant


@dataclass(frozen=True)
class SessionRow:
    tenant: Tenant
    id: str
    client: str
    protocol_version: str
    credential: str
    started: datetime
    last_seen: datetime
    stream_holder: str | None


def _store() -> SessionStore:
    return SessionStore(async_redis(), command_batch(), idle_seconds=settings.MCP_SESSION_IDLE_SECONDS)


def _row(tenant: Tenant, live: LiveSession) -> SessionRow:
    info = live.session.client_info
    client = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    holder = live.stream_holder.rsplit(":", 1)[0] if live.stream_holder else None
    return SessionRow(
        tenant=tenant,
        id=live.session.id,
        client=client,
        protocol_version=live.session.protocol_version,
        credential=live.session.credential,
        started=datetime.fromtimestamp(live.session.created_at, UTC),
        last_seen=datetime.fromtimestamp(live.last_seen, UTC),
        stream_holder=holder,
    )


async def _live(tenants: list[Tenant]) -> list[SessionRow]:
    store = _store()
    rows: list[SessionRow] = []
    for tenant in tenants:
        rows.extend(_row(tenant, live) for live in await store.live(tenant.pk))
    return rows


def live_sessions_of(tenants: list[Tenant]) -> list[SessionRow]:
    return async_to_sync(_live)(tenants)


async def _end(tenant: Tenant, session_id: str) -> bool:
    store = _store()
    session = await store.get(session_id)
    if session is None or session.tenant_id != tenant.pk:
        return False
    await store.delete(session.id, session.tenant_id)
    await get_channel_layer().group_send(names.tenant_group(tenant.pk), messages.session_ended(tenant.pk, session_id))
    return True


def session_end(*, tenant: Tenant, session_id: str) -> bool:
    """End one of the tenant's sessions; False when it has no such session."""
    return async_to_sync(_end)(tenant, session_id)
