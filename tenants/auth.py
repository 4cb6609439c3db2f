"""The hot-path credential check: who is calling ``/mcp/<slug>``, with no database query once warm.

``TenantDirectory`` keeps, per process, each tenant's settings and API keys (hashes only)
as of the tenant's generation (``mcp_platform.generations``). A request costs one Redis
round trip, reading that generation; a generation that moved, or a record older than
``MAX_AGE_SECONDS`` (a safety net should a publish ever fail), reloads the tenant once,
with concurrent requests waiting on the same load.

Memory stays bounded whatever is asked for: at most ``MAX_ENTRIES`` tenant records and
``MAX_MISSING`` remembered unknown slugs, each dropped least recently used first, one at a
time; nothing per slug while no load runs (``SingleFlight``); "last used" write times only
for keys used within ``LAST_USED_WRITE_INTERVAL``. Caches of what a tenant's callers see
(``tools_app.catalog.cache``) follow the records kept here: a new record means reload.

API keys are checked here. Any other bearer credential is an OAuth access token, handed to
the ``TokenVerifier`` the OAuth app installs (``oauth.resource.verifier``): it keeps the
tenant's OAuth settings and its issuers' keys in caches that follow the same records, so
a warm token check costs no database query either.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, Protocol

from asgiref.sync import sync_to_async
from django.utils import timezone

from mcp_platform import generations
from mcp_platform.metrics import cache_stats
from mcp_platform.single_flight import SingleFlight
from tenants import keys
from tenants.models import ApiKey
from tenants.principal import Principal
from tenants.selectors import active_tenant_with_keys

MAX_AGE_SECONDS = 60.0
# Unknown slugs are remembered briefly so a scan of random URLs cannot reach the database
# on every request; a new tenant clears them through the "all" generation.
MISSING_TTL_SECONDS = 5.0
# A record holds a tenant's settings and key hashes: about 1 KiB with a few keys.
MAX_ENTRIES = 10_000
# A remembered unknown slug costs about 300 bytes; a scan of more distinct slugs than this
# within MISSING_TTL_SECONDS just pushes the oldest out (each new slug costs one query).
MAX_MISSING = 1_024
# last_used_at is informational; writing it at most this often keeps writes off the hot path.
LAST_USED_WRITE_INTERVAL = 300.0


@dataclass(frozen=True)
class Challenge:
    """What a 401 or 403 tells an OAuth client (RFC 6750 §3, RFC 9728 §5.1): where the
    tenant's Protected Resource Metadata is, the scope the request needs, and for a bad
    token or a missing scope the error code."""

    resource_metadata: str
    scope: str = ""
    error: str = ""  # "invalid_token", "insufficient_scope" or empty (no credential at all)
    error_description: str = ""


class AuthFailure(Exception):
    """Why a request has no principal; ``status`` is the HTTP status to answer with."""

    def __init__(
        self, status: int, message: str, tenant_id: int | None = None, *, challenge: Challenge | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.tenant_id = tenant_id  # known for 401s: the refusal is recorded for that tenant
        self.challenge = challenge  # None: the tenant does not advertise OAuth


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: int
    name: str
    prefix: str
    key_hash: str
    scopes: frozenset[str]
    expires_at: datetime | None
    revoked: bool
    # Made with the record and shared by every request and session of the key: a thousand
    # open streams of one key hold one principal (a reload makes new records).
    principal: Principal
    tool_listing: str = ""  # empty: the tenant's


@dataclass(frozen=True, eq=False)
class TenantRecord:
    """An active tenant as one load saw it; a reload makes a new record (compared by identity)."""

    tenant_id: int
    slug: str
    allow_anonymous: bool
    api_keys_enabled: bool
    calls_per_minute: int | None
    max_concurrent_calls: int | None
    generation: generations.Generation
    loaded_at: float
    keys_by_prefix: dict[str, KeyRecord]
    tool_listing: str = "list"

    def lists_by_search(self, key_prefix: str) -> bool:
        """Whether tools/list answers this credential (an API key's prefix; "" for OAuth and
        anonymous callers) with the search tool instead of every tool."""
        key = self.keys_by_prefix.get(key_prefix) if key_prefix else None
        return ((key.tool_listing if key is not None else "") or self.tool_listing) == "search"


def _key_record(tenant: dict[str, Any], key: dict[str, Any]) -> KeyRecord:
    scopes = frozenset(key["scopes"]) if key["scopes"] else _NO_SCOPES
    return KeyRecord(
        id=key["id"],
        name=key["name"],
        prefix=key["prefix"],
        key_hash=key["key_hash"],
        scopes=scopes,
        expires_at=key["expires_at"],
        revoked=key["revoked_at"] is not None,
        principal=Principal(tenant["id"], tenant["slug"], key["id"], key["name"], key["prefix"], scopes),
        tool_listing=key["tool_listing"],
    )


def _load(slug: str, generation: generations.Generation) -> TenantRecord | None:
    found = active_tenant_with_keys(slug)
    if found is None:
        return None
    tenant, api_keys = found
    records = {key["prefix"]: _key_record(tenant, key) for key in api_keys}
    return TenantRecord(
        tenant_id=tenant["id"],
        slug=tenant["slug"],
        allow_anonymous=tenant["allow_anonymous"],
        api_keys_enabled=tenant["api_keys_enabled"],
        calls_per_minute=tenant["calls_per_minute"],
        max_concurrent_calls=tenant["max_concurrent_calls"],
        generation=generation,
        loaded_at=time.monotonic(),
        keys_by_prefix=records,
        tool_listing=tenant["tool_listing"],
    )


_NO_SCOPES: frozenset[str] = frozenset()  # shared: an empty frozenset is 216 bytes apiece


class _Loaded(NamedTuple):
    generation: generations.Generation
    started: float
    record: TenantRecord | None


def _touch_key(key_id: int) -> None:
    ApiKey.objects.filter(pk=key_id).update(last_used_at=timezone.now())


def _matching_key(tenant: TenantRecord, prefix: str | None, raw: str) -> KeyRecord | None:
    """The tenant's key that ``raw`` is. Hashed and compared even when the prefix is unknown,
    so timing does not tell which prefixes exist."""
    record = tenant.keys_by_prefix.get(prefix) if prefix else None
    matches = keys.key_matches(raw, record.key_hash if record else "0" * 64)
    return record if matches else None


def _key_usable(record: KeyRecord | None) -> bool:
    if record is None or record.revoked:
        return False
    return record.expires_at is None or record.expires_at > timezone.now()


def _principal(tenant: TenantRecord, key: KeyRecord | None) -> Principal:
    if key is None:
        return Principal(tenant.tenant_id, tenant.slug, None, "anonymous", "", _NO_SCOPES)
    return key.principal


class TokenVerifier(Protocol):
    """Checks OAuth access tokens for a tenant (installed by the OAuth app).

    ``origin`` is the scheme and authority the request came to (``https://host:port``): the
    tenant's canonical resource URL, and with it the audience its tokens must name, is built
    from it unless ``TOOLBAY_PUBLIC_URL`` fixes it.
    """

    async def verify(self, tenant: TenantRecord, token: str, origin: str) -> Principal:
        """The principal the token maps to; raises AuthFailure (401) for any bad token."""

    async def challenge(self, tenant: TenantRecord, origin: str) -> Challenge | None:
        """What a 401 of this tenant says to OAuth clients; None when it does not offer OAuth."""

    async def revalidate(self, tenant: TenantRecord, principal: Principal) -> Principal | None:
        """The OAuth principal as it stands now (token expired, grant revoked, issuer no longer
        trusted: None)."""

    def authorize(self, tenant: TenantRecord, principal: Principal, method: str) -> None:
        """Raise AuthFailure (403, insufficient_scope) when the token's scopes do not cover
        ``method``. Synchronous and I/O-free: the settings were loaded by ``verify``."""


class TenantDirectory:
    def __init__(self) -> None:
        self._verifier: TokenVerifier | None = None
        self._entries: OrderedDict[str, TenantRecord] = OrderedDict()
        # Unknown or inactive slugs: (generation, when) of the load that found nothing.
        self._missing: OrderedDict[str, tuple[generations.Generation, float]] = OrderedDict()
        self._loads: SingleFlight[str, _Loaded] = SingleFlight()
        # Key id -> when its last_used_at was last written, oldest first.
        self._last_used_written: OrderedDict[int, float] = OrderedDict()
        self._shared_checks: dict[str, asyncio.Future[TenantRecord | None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.stats = cache_stats("tenants")
        self.missing_stats = cache_stats("unknown_tenants")

    def use_token_verifier(self, verifier: TokenVerifier | None) -> None:
        """Install the OAuth token check (the OAuth app does, when Django starts)."""
        self._verifier = verifier

    @property
    def token_verifier(self) -> TokenVerifier | None:
        return self._verifier

    def clear(self) -> None:
        self._entries.clear()
        self._missing.clear()
        self._last_used_written.clear()
        self.stats.entries = self.missing_stats.entries = 0

    def held(self) -> dict[str, int]:
        """How many items each per-process structure holds now (for tests and the benchmark)."""
        return {
            "records": len(self._entries),
            "missing": len(self._missing),
            "loads": len(self._loads),
            "last_used": len(self._last_used_written),
            "shared_checks": len(self._shared_checks),
        }

    async def tenant(self, slug: str) -> TenantRecord | None:
        """The active tenant, fresh as of its current generation; None if unknown or inactive."""
        generation = await generations.read(slug)
        now = time.monotonic()
        entry = self._entries.get(slug)
        if entry is not None:
            if entry.generation == generation and now - entry.loaded_at < MAX_AGE_SECONDS:
                self._entries.move_to_end(slug)
                self.stats.hits += 1
                return entry
        else:
            missing = self._missing.get(slug)
            if missing is not None and missing[0] == generation and now - missing[1] < MISSING_TTL_SECONDS:
                self.missing_stats.hits += 1
                return None
        # What the load must be newer than: the stale record (or remembered miss), if any.
        stale_since = entry.loaded_at if entry is not None else self._missing.get(slug, (generation, 0.0))[1]
        return await self._reload(slug, generation, stale_since)

    async def _reload(self, slug: str, generation: generations.Generation, stale_since: float) -> TenantRecord | None:
        # The generation was read before the rows: a change committed meanwhile bumps it
        # again, so the next request reloads instead of keeping what this load saw.
        while True:
            loaded = await self._loads.run(slug, partial(self._load_now, slug, generation))
            # A running load this request joined counts if it read this generation (or a later
            # one) and began after the stale record was loaded: past MAX_AGE_SECONDS the record
            # must really be read again, not handed back (the safety net for a missed bump).
            current = loaded.generation[0] >= generation[0] and loaded.generation[1] >= generation[1]
            if current and loaded.started > stale_since:
                return loaded.record

    async def _load_now(self, slug: str, generation: generations.Generation) -> _Loaded:
        started = time.monotonic()
        loaded = await sync_to_async(_load)(slug, generation)
        if loaded is None:
            self.missing_stats.misses += 1
            if self._entries.pop(slug, None) is not None:
                self.stats.entries -= 1
            self._missing[slug] = (generation, started)
            self._missing.move_to_end(slug)
            while len(self._missing) > MAX_MISSING:
                self._missing.popitem(last=False)
                self.missing_stats.evictions += 1
            self.missing_stats.entries = len(self._missing)
        else:
            self.stats.misses += 1
            if self._missing.pop(slug, None) is not None:
                self.missing_stats.entries -= 1
            self._entries[slug] = loaded
            self._entries.move_to_end(slug)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
                self.stats.evictions += 1
            self.stats.entries = len(self._entries)
        return _Loaded(generation, started, loaded)

    async def authenticate(self, slug: str, authorization: str | None, origin: str = "") -> Principal:
        """Resolve the caller of ``/mcp/<slug>``; raises AuthFailure (404 or 401).

        Unknown, other tenants', revoked and expired keys are refused alike, and a key is
        hashed and compared even when its prefix is unknown, so timing reveals nothing.
        A bearer credential that is not shaped like an API key is an OAuth access token.
        """
        tenant = await self.tenant(slug)
        if tenant is None:
            raise AuthFailure(404, "Unknown tenant")
        if authorization is None:
            if tenant.allow_anonymous:
                return _principal(tenant, None)
            challenge = await self._challenge(tenant, origin)
            if challenge is not None:
                message = "This endpoint requires authorization: send Authorization: Bearer <access token or API key>"
            else:
                message = "This endpoint requires an API key: send Authorization: Bearer <key>"
            raise AuthFailure(401, message, tenant.tenant_id, challenge=challenge)
        scheme, _, raw = authorization.partition(" ")
        raw = raw.strip()
        if scheme.lower() != "bearer" or not raw:
            challenge = await self._challenge(tenant, origin)
            raise AuthFailure(
                401,
                "Malformed Authorization header: expected 'Bearer <credential>'",
                tenant.tenant_id,
                challenge=challenge,
            )
        prefix = keys.parse_prefix(raw)
        if prefix is None and self._verifier is not None:
            return replace(await self._verifier.verify(tenant, raw, origin), bearer=raw)
        record = _matching_key(tenant, prefix, raw)
        if record is None or record.revoked or not tenant.api_keys_enabled:
            message = "Invalid API key" if tenant.api_keys_enabled else "API keys are turned off for this tenant"
            raise AuthFailure(401, message, tenant.tenant_id, challenge=await self._challenge(tenant, origin))
        if not _key_usable(record):
            raise AuthFailure(
                401, "API key has expired", tenant.tenant_id, challenge=await self._challenge(tenant, origin)
            )
        self._note_use(record.id)
        return _principal(tenant, record)

    def admits(self, slug: str, authorization: str | None) -> TenantRecord | None:
        """The tenant's record as this process holds it, if it lets this credential in: an
        anonymous caller where that is allowed, or a usable API key (OAuth tokens only their
        verifier judges). No I/O and no freshness check: ``authenticate`` still decides. For
        work that may start while the credential is checked, and only for callers who hold
        a credential (a stranger's request must not start it)."""
        tenant = self._entries.get(slug)
        if tenant is None:
            return None
        if authorization is None:
            return tenant if tenant.allow_anonymous else None
        scheme, _, raw = authorization.partition(" ")
        raw = raw.strip()
        prefix = keys.parse_prefix(raw) if scheme.lower() == "bearer" else None
        if prefix is None or not tenant.api_keys_enabled:
            return None
        return tenant if _key_usable(_matching_key(tenant, prefix, raw)) else None

    async def _challenge(self, tenant: TenantRecord, origin: str) -> Challenge | None:
        return await self._verifier.challenge(tenant, origin) if self._verifier is not None else None

    def authorize(self, principal: Principal, method: str) -> None:
        """Raise AuthFailure (403) when an OAuth principal's scopes do not cover ``method``."""
        if not principal.is_oauth or self._verifier is None:
            return
        tenant = self.cached(principal)
        if tenant is not None:
            self._verifier.authorize(tenant, principal, method)

    def _note_use(self, key_id: int) -> None:
        now = time.monotonic()
        last = self._last_used_written.get(key_id)
        if last is not None and now - last < LAST_USED_WRITE_INTERVAL:
            return
        # Entries older than the interval would not hold a write back: forget them (oldest first).
        written = self._last_used_written
        while written and now - next(iter(written.values())) >= LAST_USED_WRITE_INTERVAL:
            written.popitem(last=False)
        written.pop(key_id, None)
        written[key_id] = now
        task = asyncio.get_running_loop().create_task(sync_to_async(_touch_key, thread_sensitive=False)(key_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _shared_check(self, slug: str) -> TenantRecord | None:
        """Like ``tenant``, but concurrent callers share one generation check.

        For fan-out: a change wakes hundreds of streams of one tenant at once, and one Redis
        round trip answers them all. Requests keep their own check (``tenant``).
        """
        pending = self._shared_checks.get(slug)
        if pending is None:
            pending = asyncio.ensure_future(self.tenant(slug))
            self._shared_checks[slug] = pending
            pending.add_done_callback(lambda _: self._shared_checks.pop(slug, None))
        return await asyncio.shield(pending)

    async def revalidate(self, principal: Principal) -> Principal | None:
        """The principal as its tenant stands now, or None if it is no longer valid (key
        revoked, expired or gone, token expired or its grant revoked, tenant deactivated,
        anonymous access, API keys or OAuth turned off)."""
        tenant = await self._shared_check(principal.tenant_slug)
        if tenant is None or tenant.tenant_id != principal.tenant_id:
            return None
        if principal.is_oauth:
            return await self._verifier.revalidate(tenant, principal) if self._verifier is not None else None
        if principal.key_id is None:
            return principal if tenant.allow_anonymous else None
        if not tenant.api_keys_enabled:
            return None
        record = tenant.keys_by_prefix.get(principal.key_prefix)
        if record is None or record.id != principal.key_id or not _key_usable(record):
            return None
        return _principal(tenant, record)

    def cached(self, principal: Principal) -> TenantRecord | None:
        """The principal's tenant as this request already loaded it (no I/O)."""
        tenant = self._entries.get(principal.tenant_slug)
        return tenant if tenant is not None and tenant.tenant_id == principal.tenant_id else None


tenant_directory = TenantDirectory()
