"""Catalog change fan-out: after a commit, tell every process which tenants' views moved.

Any write that can change what a credential sees calls ``catalog_changed``. Nothing is
sent until the transaction commits, nothing for a rolled-back one, and a transaction that
touches 500 rows sends one message per affected tenant.

Each flush bumps a per-tenant generation in Redis (``GENERATION_KEY``, one field per
tenant slug, and field ``all`` for changes that concern every tenant). Fields are keyed
by slug so a cache can read them before it knows anything else about the tenant.
Hot-path caches compare generations on every request, so an invalidation cannot be lost
the way a missed pub/sub message could. Then one channel-layer message per affected tenant
(or one for all) reaches every ASGI process's stream hub, which wakes the open sessions of
that tenant (see ``mcp_platform.mcp.hub``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tenants.models import Tenant

log = logging.getLogger(__name__)

GENERATION_KEY = "toolbay:catalog:gen"
ALL_TENANTS = "all"


def generation_field(slug: str) -> str:
    return f"t:{slug}"


@dataclass(eq=False)
class _Pending:
    """Tenants touched by the current transaction; calling it flushes them."""

    tenant_ids: set[int | None] = field(default_factory=set)

    def __call__(self) -> None:
        tenant_ids = set(self.tenant_ids)
        self.tenant_ids.clear()
        _publish(tenant_ids)


def _publish(tenant_ids: set[int | None]) -> None:
    fields = [ALL_TENANTS] if None in tenant_ids else []
    known = {t for t in tenant_ids if t is not None}
    try:
        if known:
            slugs = Tenant.objects.filter(pk__in=known).values_list("slug", flat=True)
            fields.extend(generation_field(slug) for slug in slugs)
        if not fields:
            return
        pipe = sync_redis().pipeline(transaction=False)
        for name in fields:
            pipe.hincrby(GENERATION_KEY, name, 1)
        pipe.execute()
    except Exception:  # the change is committed; caches fall back to their max age
        log.exception("could not publish catalog change for tenants %s", sorted(map(str, tenant_ids)))
        return
    # Generations first, then the wake-up: a session that wakes must see the new generation.
    if None in tenant_ids:
        messages: list[tuple[str, int | None]] = [(names.CATALOG_ALL_GROUP, None)]
    else:
        messages = [(names.tenant_group(t), t) for t in sorted(known)]
    try:
        async_to_sync(_wake_sessions)(messages)
    except Exception:  # sessions then learn of it on their next request or stream
        log.exception("could not wake sessions after a catalog change")


async def _wake_sessions(messages: list[tuple[str, int | None]]) -> None:
    layer = get_channel_layer()
    for group, tenant_id in messages:
        await layer.group_send(group, {"type": "catalog.changed", "tenant_id": tenant_id})


def catalog_changed(tenant_id: int | None) -> None:
    """Record that ``tenant_id``'s view changed (None: every tenant's)."""
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        _publish({tenant_id})
        return
    pending: _Pending | None = getattr(connection, "_toolbay_catalog_pending", None)
    if pending is None or not any(callback is pending for _, callback, _ in connection.run_on_commit):
        # None of ours is queued (first change, or Django dropped it with a rollback):
        # start a fresh set for this transaction.
        pending = _Pending()
        connection._toolbay_catalog_pending = pending  # type: ignore[attr-defined]
        transaction.on_commit(pending)
    pending.tenant_ids.add(tenant_id)
