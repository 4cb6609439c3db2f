"""The hot-path catalog: tenant, credentials and visible tools, cached per process.

A request costs one Redis round trip (the tenant's generation, see ``tools_app.changes``)
and no database query while the cache is warm. A generation that moved, or an entry older
than ``MAX_AGE_SECONDS`` (a safety net should a publish ever fail), reloads the tenant from
the database once, with concurrent requests waiting on the same load.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from asgiref.sync import sync_to_async
from django.utils import timezone

from mcp_platform.redis_clients import async_redis
from tenants import keys
from tenants.models import ApiKey
from tenants.principal import Principal
from tenants.selectors import api_keys_of, tenant_active_by_slug
from tools_app.access import visible_tools
from tools_app.changes import ALL_TENANTS, GENERATION_KEY, generation_field
from tools_app.selectors import catalog_snapshot
from tools_app.spec import RuleSpec, ToolSpec

MAX_AGE_SECONDS = 60.0
# Unknown slugs are remembered briefly so a scan of random URLs cannot reach the database
# on every request; a new tenant clears them through the "all" generation.
MISSING_TTL_SECONDS = 5.0
MAX_ENTRIES = 10_000
# last_used_at is informational; writing it at most this often keeps writes off the hot path.
LAST_USED_WRITE_INTERVAL = 300.0


@dataclass(frozen=True)
class KeyRecord:
    id: int
    name: str
    prefix: str
    key_hash: str
    scopes: frozenset[str]
    expires_at: datetime | None
    revoked: bool


@dataclass(frozen=True)
class VisibleSet:
    tools: tuple[ToolSpec, ...]
    by_name: dict[str, ToolSpec]
    digest: str  # changes exactly when the listed tools (or their versions) change


@dataclass
class TenantCatalog:
    tenant_id: int
    slug: str
    allow_anonymous: bool
    calls_per_minute: int | None
    max_concurrent_calls: int | None
    generation: tuple[int, int]
    loaded_at: float
    keys_by_prefix: dict[str, KeyRecord]
    tools: tuple[ToolSpec, ...]
    rules: tuple[RuleSpec, ...]
    _visible: dict[tuple[int | None, frozenset[str]], VisibleSet] = field(default_factory=dict)

    def visible(self, principal: Principal) -> VisibleSet:
        memo_key = (principal.key_id, principal.scopes)
        found = self._visible.get(memo_key)
        if found is None:
            tools = tuple(visible_tools(self.tools, self.rules, principal))
            digest = hashlib.sha256("|".join(f"{t.id}:{t.version}" for t in tools).encode()).hexdigest()
            found = VisibleSet(tools=tools, by_name={t.name: t for t in tools}, digest=digest)
            self._visible[memo_key] = found
        return found


class AuthFailure(Exception):
    """Why a request has no principal; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, tenant_id: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.tenant_id = tenant_id  # known for 401s: the refusal is recorded for that tenant


def _generation(raw: list[bytes | str | None]) -> tuple[int, int]:
    return (int(raw[0] or 0), int(raw[1] or 0))


def _load_catalog(slug: str, generation: tuple[int, int]) -> TenantCatalog | None:
    tenant = tenant_active_by_slug(slug)
    if tenant is None:
        return None
    records = {
        key.prefix: KeyRecord(
            id=key.pk,
            name=key.name,
            prefix=key.prefix,
            key_hash=key.key_hash,
            scopes=frozenset(key.scopes or []),
            expires_at=key.expires_at,
            revoked=key.revoked_at is not None,
        )
        for key in api_keys_of(tenant)
    }
    snapshot = catalog_snapshot(tenant.pk)
    return TenantCatalog(
        tenant_id=tenant.pk,
        slug=tenant.slug,
        allow_anonymous=tenant.allow_anonymous,
        calls_per_minute=tenant.calls_per_minute,
        max_concurrent_calls=tenant.max_concurrent_calls,
        generation=generation,
        loaded_at=time.monotonic(),
        keys_by_prefix=records,
        tools=snapshot.tools,
        rules=snapshot.rules,
    )


def _touch_key(key_id: int) -> None:
    ApiKey.objects.filter(pk=key_id).update(last_used_at=timezone.now())


class CatalogCache:
    def __init__(self) -> None:
        self._entries: OrderedDict[str, TenantCatalog] = OrderedDict()
        self._missing: dict[str, tuple[tuple[int, int], float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._last_used_written: dict[int, float] = {}
        self._shared_checks: dict[str, asyncio.Future[TenantCatalog | None]] = {}

    def clear(self) -> None:
        self._entries.clear()
        self._missing.clear()
        self._last_used_written.clear()

    async def catalog(self, slug: str) -> TenantCatalog | None:
        """The active tenant's catalog, fresh as of its current generation; None if unknown."""
        generation = _generation(await async_redis().hmget(GENERATION_KEY, [ALL_TENANTS, generation_field(slug)]))
        entry = self._entries.get(slug)
        if entry is not None:
            if entry.generation == generation and time.monotonic() - entry.loaded_at < MAX_AGE_SECONDS:
                self._entries.move_to_end(slug)
                return entry
        else:
            missing = self._missing.get(slug)
            if missing is not None and missing[0] == generation and time.monotonic() - missing[1] < MISSING_TTL_SECONDS:
                return None
        return await self._reload(slug, generation)

    async def _reload(self, slug: str, generation: tuple[int, int]) -> TenantCatalog | None:
        # The generation was read before the rows: a change committed meanwhile bumps it
        # again, so the next request reloads instead of keeping what this load saw.
        lock = self._locks.setdefault(slug, asyncio.Lock())
        async with lock:
            current = self._entries.get(slug)
            if current is not None and current.generation == generation:
                return current  # another request loaded it while we waited
            loaded = await sync_to_async(_load_catalog)(slug, generation)
            if loaded is None:
                self._entries.pop(slug, None)
                self._missing[slug] = (generation, time.monotonic())
            else:
                self._missing.pop(slug, None)
                self._entries[slug] = loaded
            self._trim()
            return loaded

    def _trim(self) -> None:
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)
        if len(self._missing) > MAX_ENTRIES:
            self._missing.clear()

    async def authenticate(self, slug: str, authorization: str | None) -> Principal:
        """Resolve the caller of ``/mcp/<slug>``; raises AuthFailure (404 or 401)."""
        catalog = await self.catalog(slug)
        if catalog is None:
            raise AuthFailure(404, "Unknown tenant")
        if authorization is None:
            if catalog.allow_anonymous:
                return Principal(catalog.tenant_id, catalog.slug, None, "anonymous", "", frozenset())
            message = "This endpoint requires an API key: send Authorization: Bearer <key>"
            raise AuthFailure(401, message, catalog.tenant_id)
        scheme, _, raw = authorization.partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            raise AuthFailure(401, "Malformed Authorization header: expected 'Bearer <key>'", catalog.tenant_id)
        prefix = keys.parse_prefix(raw)
        record = catalog.keys_by_prefix.get(prefix) if prefix else None
        # Hash and compare even for unknown prefixes so timing does not reveal which exist.
        stored_hash = record.key_hash if record else "0" * 64
        matches = keys.key_matches(raw, stored_hash)
        if record is None or not matches or record.revoked:
            raise AuthFailure(401, "Invalid API key", catalog.tenant_id)
        if record.expires_at is not None and record.expires_at <= timezone.now():
            raise AuthFailure(401, "API key has expired", catalog.tenant_id)
        self._note_use(record.id)
        return Principal(catalog.tenant_id, catalog.slug, record.id, record.name, record.prefix, record.scopes)

    def _note_use(self, key_id: int) -> None:
        now = time.monotonic()
        last = self._last_used_written.get(key_id)
        if last is not None and now - last < LAST_USED_WRITE_INTERVAL:
            return
        self._last_used_written[key_id] = now
        task = asyncio.get_running_loop().create_task(sync_to_async(_touch_key, thread_sensitive=False)(key_id))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _catalog_shared_check(self, slug: str) -> TenantCatalog | None:
        """Like ``catalog``, but concurrent callers share one generation check.

        For fan-out: a change wakes hundreds of streams of one tenant at once, and one Redis
        round trip answers them all. Requests keep their own check (``catalog``).
        """
        pending = self._shared_checks.get(slug)
        if pending is None:
            pending = asyncio.ensure_future(self.catalog(slug))
            self._shared_checks[slug] = pending
            pending.add_done_callback(lambda _: self._shared_checks.pop(slug, None))
        return await asyncio.shield(pending)

    async def revalidate(self, principal: Principal) -> Principal | None:
        """The principal as the current catalog sees it, or None if it is no longer valid."""
        catalog = await self._catalog_shared_check(principal.tenant_slug)
        if catalog is None or catalog.tenant_id != principal.tenant_id:
            return None
        if principal.key_id is None:
            return principal if catalog.allow_anonymous else None
        record = catalog.keys_by_prefix.get(principal.key_prefix)
        if record is None or record.id != principal.key_id or record.revoked:
            return None
        if record.expires_at is not None and record.expires_at <= timezone.now():
            return None
        return Principal(catalog.tenant_id, catalog.slug, record.id, record.name, record.prefix, record.scopes)

    def cached(self, principal: Principal) -> TenantCatalog | None:
        """The principal's tenant as this request already loaded it (no I/O)."""
        catalog = self._entries.get(principal.tenant_slug)
        return catalog if catalog is not None and catalog.tenant_id == principal.tenant_id else None

    async def visible(self, principal: Principal) -> VisibleSet:
        catalog = self._entries.get(principal.tenant_slug)
        if catalog is None or catalog.tenant_id != principal.tenant_id:
            catalog = await self.catalog(principal.tenant_slug)
            if catalog is None or catalog.tenant_id != principal.tenant_id:
                return VisibleSet(tools=(), by_name={}, digest="")
        return catalog.visible(principal)


_background: set[asyncio.Task[None]] = set()

catalog_cache = CatalogCache()
