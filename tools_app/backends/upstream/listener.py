"""Keeping imported tools in step with their upstream MCP servers.

``manage.py listen_upstreams`` runs ``listen_upstreams()``: for every enabled upstream it
holds a session with a standing GET stream, refreshes (re-imports) when the upstream
sends ``notifications/tools/list_changed`` (or, for servers whose resources and prompts
are imported, ``…/resources/list_changed`` and ``…/prompts/list_changed``), and also every
``TOOLBAY_UPSTREAM_REFRESH_SECONDS`` as a safety net for upstreams that never announce
changes (or offer no GET stream). A refresh writes ``Tool`` rows through
``tools_app.upstreams``, so the normal list-changed flow tells Toolbay's own clients.

Any number of listener processes may run: a Redis lease per upstream lets exactly one of
them watch it, and another takes over within ``LEASE_SECONDS`` when that one dies. The
set of upstreams is read again every ``sync_seconds``; an upstream whose settings
changed gets a fresh session.

For imported resources the listener also subscribes to their URIs upstream (when the
upstream supports it), and passes ``notifications/resources/updated`` on to Toolbay's
own subscribers (``tools_app.catalog.changes.aresource_updated``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from mcp_platform.redis_clients import async_redis
from tools_app.backends.upstream.client import ListenUnsupported, UpstreamError, UpstreamSession, UpstreamUnavailable
from tools_app.backends.upstream.federation import (
    UpstreamRefreshError,
    endpoint_of,
    mirrored_resources,
    mirrored_uris,
    upstream_refresh_async,
)
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import SecretUnavailable
from tools_app.catalog.changes import aresource_updated

log = logging.getLogger(__name__)

LEASE_SECONDS = 30
LEASE_RENEW_SECONDS = 10
# A burst of list_changed notifications (an upstream adding ten tools) becomes one refresh.
DEBOUNCE_SECONDS = 0.2
LIST_CHANGES = {
    "notifications/tools/list_changed",
    "notifications/resources/list_changed",
    "notifications/prompts/list_changed",
}
MAX_UPSTREAM_SUBSCRIPTIONS = 1000
MAX_BACKOFF_SECONDS = 60.0


def lease_key(upstream_id: int) -> str:
    return f"toolbay:upstreams:lease:{upstream_id}"


def _enabled_upstreams() -> dict[int, tuple[Any, ...]]:
    """Enabled upstreams with a fingerprint of what their session depends on."""
    # Packaged servers are watched by their runner (a standing stream would keep them warm).
    rows = UpstreamServer.objects.filter(enabled=True, kind=UpstreamServer.Kind.HTTP).values_list(
        "pk", "url", "auth", "auth_header", "secret_id", "secret__updated_at"
    )
    return {row[0]: row[1:] for row in rows}


class _Lease:
    def __init__(self, upstream_id: int) -> None:
        self.key = lease_key(upstream_id)
        self.token = secrets.token_hex(8)

    async def acquire(self) -> bool:
        return bool(await async_redis().set(self.key, self.token, nx=True, ex=LEASE_SECONDS))

    async def renew(self) -> bool:
        redis = async_redis()
        if await redis.get(self.key) != self.token.encode():
            return False
        await redis.expire(self.key, LEASE_SECONDS)
        return True

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            redis = async_redis()
            if await redis.get(self.key) == self.token.encode():
                await redis.delete(self.key)


async def _refresh(upstream_id: int, session: UpstreamSession) -> None:
    try:
        report = await upstream_refresh_async(upstream_id=upstream_id, session=session)
    except UpstreamRefreshError as exc:
        log.warning("upstream %s: refresh failed: %s", upstream_id, exc)
        return
    if report.changed:
        log.info("upstream %s changed its tools: %s", upstream_id, report.summary())
    await subscribe_mirrored(upstream_id, session)


async def subscribe_mirrored(upstream_id: int, session: UpstreamSession) -> None:
    """Subscribe to the imported resources upstream, so their updates reach us (best effort)."""
    resources = session.capabilities.get("resources")
    if not isinstance(resources, dict) or not resources.get("subscribe"):
        return
    for uri in (await sync_to_async(mirrored_uris)(upstream_id))[:MAX_UPSTREAM_SUBSCRIPTIONS]:
        try:
            await session.request("resources/subscribe", {"uri": uri})
        except (UpstreamError, UpstreamUnavailable) as exc:
            log.info("upstream %s: cannot subscribe to %s: %s", upstream_id, uri, exc)


async def pass_on_update(upstream_id: int, uri: object) -> None:
    if not isinstance(uri, str):
        return
    for local_uri, tenant_id in await sync_to_async(mirrored_resources)(upstream_id, uri):
        await aresource_updated(local_uri, tenant_id=tenant_id)


async def _refresh_when_told(upstream_id: int, session: UpstreamSession, changed: asyncio.Event) -> None:
    interval = settings.TOOLBAY_UPSTREAM_REFRESH_SECONDS or None
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout=interval)
        await asyncio.sleep(DEBOUNCE_SECONDS)
        changed.clear()
        await _refresh(upstream_id, session)


async def _follow(upstream_id: int) -> None:
    """One session with the upstream: catch up, then refresh on list_changed until the
    stream ends. Raises on trouble; the caller retries with back-off."""
    upstream = await UpstreamServer.objects.select_related("secret").aget(pk=upstream_id)
    session = UpstreamSession(endpoint_of(upstream))
    changed = asyncio.Event()

    async def on_message(message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method")
        if method in LIST_CHANGES:
            log.info("upstream %s announced a change of its tools or other lists (%s)", upstream.name, method)
            changed.set()
        elif method == "notifications/resources/updated":
            params = message.get("params")
            await pass_on_update(upstream_id, params.get("uri") if isinstance(params, dict) else None)
        return None

    try:
        await session.initialize()
        await _refresh(upstream_id, session)  # whatever changed while nobody listened
        refresher = asyncio.ensure_future(_refresh_when_told(upstream_id, session, changed))
        try:
            try:
                await session.listen(on_message)
            except ListenUnsupported:
                log.info("upstream %s has no GET stream; refreshing periodically only", upstream.name)
                await refresher
            # The upstream ended the stream (a restart, an idle timeout): reconnect.
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
    finally:
        await session.close()


async def watch_upstream(upstream_id: int) -> None:
    """Follow one upstream forever (while holding its lease), reconnecting with back-off."""
    backoff = 1.0
    lease = _Lease(upstream_id)
    while True:
        try:
            acquired = await lease.acquire()
        except Exception as exc:  # Redis away: nobody can watch; try again later
            log.warning("upstream %s: cannot take the listener lease: %s", upstream_id, exc)
            acquired = False
        if not acquired:
            await asyncio.sleep(LEASE_RENEW_SECONDS)  # another listener watches it
            continue
        work = asyncio.ensure_future(_follow(upstream_id))
        started = asyncio.get_running_loop().time()
        try:
            while not work.done():
                await asyncio.wait({work}, timeout=LEASE_RENEW_SECONDS)
                if not work.done() and not await lease.renew():
                    log.warning("upstream %s: lost the listener lease", upstream_id)
                    work.cancel()
                    await asyncio.wait({work})
            if not work.cancelled():
                work.result()  # raises what ended the session
        except (UpstreamUnavailable, SecretUnavailable, UpstreamServer.DoesNotExist) as exc:
            log.warning("upstream %s: %s", upstream_id, exc)
        except Exception:
            log.exception("upstream %s: listener failed", upstream_id)
        finally:
            work.cancel()
            await lease.release()
        if asyncio.get_running_loop().time() - started > MAX_BACKOFF_SECONDS:
            backoff = 1.0  # it ran for a good while; this is a fresh problem
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


async def listen_upstreams(stop: asyncio.Event, *, sync_seconds: float = 10.0) -> None:
    """Watch every enabled upstream until ``stop`` is set."""
    watchers: dict[int, tuple[tuple[Any, ...], asyncio.Task[None]]] = {}
    try:
        while not stop.is_set():
            try:
                wanted = await sync_to_async(_enabled_upstreams)()
            except Exception:
                log.exception("cannot read the upstream servers; trying again")
                wanted = {upstream_id: fingerprint for upstream_id, (fingerprint, _) in watchers.items()}
            for upstream_id, (fingerprint, task) in list(watchers.items()):
                if wanted.get(upstream_id) != fingerprint or task.done():
                    task.cancel()
                    del watchers[upstream_id]
            for upstream_id, fingerprint in wanted.items():
                if upstream_id not in watchers:
                    watchers[upstream_id] = (fingerprint, asyncio.ensure_future(watch_upstream(upstream_id)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=sync_seconds)
    finally:
        for _, task in watchers.values():
            task.cancel()
        for _, task in watchers.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
