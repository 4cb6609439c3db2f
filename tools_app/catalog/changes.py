"""Catalog change fan-out: after a commit, tell every process which tenants' views moved
(and which resources' content changed, for the sessions subscribed to them).

Any write that can change what a credential sees calls ``catalog_changed``. Nothing is
sent until the transaction commits, nothing for a rolled-back one, and a transaction that
touches 500 rows sends one message per affected tenant.

Each flush bumps the affected tenants' generations (``mcp_platform.generations``), which
hot-path caches compare on every request, so an invalidation cannot be lost the way a
missed pub/sub message could. Then one channel-layer message per affected tenant
(or one for all) reaches every ASGI process's stream hub, which wakes the open sessions of
that tenant (see ``mcp_platform.mcp.transport.hub``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from mcp_platform import generations
from mcp_platform.mcp import messages, names
from tenants.models import Tenant

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Pending:
    """Tenants touched by the current transaction; calling it flushes them."""

    tenant_ids: set[int | None] = field(default_factory=set)

    def __call__(self) -> None:
        tenant_ids = set(self.tenant_ids)
        self.tenant_ids.clear()
        _publish(tenant_ids)


def _publish(tenant_ids: set[int | None]) -> None:
    known = {t for t in tenant_ids if t is not None}
    try:
        slugs = list(Tenant.objects.filter(pk__in=known).values_list("slug", flat=True)) if known else []
        generations.bump(slugs, every_tenant=None in tenant_ids)
    except Exception:  # the change is committed; caches fall back to their max age
        log.exception("could not publish catalog change for tenants %s", sorted(map(str, tenant_ids)))
        return
    # Generations first, then the wake-up: a session that wakes must see the new generation.
    if None in tenant_ids:
        wake: list[tuple[str, int | None]] = [(names.CATALOG_ALL_GROUP, None)]
    else:
        wake = [(names.tenant_group(t), t) for t in sorted(known)]
    try:
        async_to_sync(_wake_sessions)(wake)
    except Exception:  # sessions then learn of it on their next request or stream
        log.exception("could not wake sessions after a catalog change")


async def _wake_sessions(groups: list[tuple[str, int | None]]) -> None:
    layer = get_channel_layer()
    for group, tenant_id in groups:
        await layer.group_send(group, messages.catalog_changed(tenant_id))


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
        connection._toolbay_catalog_pending = pending
        transaction.on_commit(pending)
    pending.tenant_ids.add(tenant_id)


def resource_updated(uri: str, *, tenant_id: int | None = None) -> None:
    """Announce that the content at ``uri`` changed: sessions subscribed to it (and still
    allowed to read it) get ``notifications/resources/updated``, on every process.

    ``tenant_id`` None reaches every tenant's sessions (a platform resource, or a template
    shared by all); a tenant's id only that tenant's. Saving a static resource's content
    calls this by itself; backends whose data changes (a file, an upstream record behind a
    resource template) call it for the URIs they serve. Sent after the transaction commits.
    """
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _announce_update(tenant_id, uri))
    else:
        _announce_update(tenant_id, uri)


async def aresource_updated(uri: str, *, tenant_id: int | None = None) -> None:
    """``resource_updated`` for async code (a resource handler, a listener)."""
    try:
        await _send_update(tenant_id, uri)
    except Exception:
        log.exception("could not announce the update of %s", uri)


def _announce_update(tenant_id: int | None, uri: str) -> None:
    try:
        async_to_sync(_send_update)(tenant_id, uri)
    except Exception:  # subscribers then miss this one update; the content itself is saved
        log.exception("could not announce the update of %s", uri)


async def _send_update(tenant_id: int | None, uri: str) -> None:
    group = names.CATALOG_ALL_GROUP if tenant_id is None else names.tenant_group(tenant_id)
    await get_channel_layer().group_send(group, messages.resource_updated(tenant_id, uri))
