"""The hot-path catalog: which tools, resources, templates and prompts each caller sees,
cached per process, and the static content of resources.

It follows the tenant records of ``tenants.auth.TenantDirectory``: every request has just
authenticated, which checked the tenant's generation (the one Redis round trip), so the
tools and rules loaded for that record are current, and a new record (the generation
moved) means loading them again. No database query while warm; what a credential sees is
computed once per catalog load and kept.

Memory is bounded by ``TOOLBAY_CATALOG_CACHE_BYTES``: each tenant's entry carries an estimate
of what it holds (``spec_rows``; the visible sets computed for its callers are added as they
are made), and past the budget the least recently used tenants are dropped one at a time. The
platform's entries and rules are loaded once per "all" generation and shared by every tenant's
entry, so a platform tool costs a tenant nothing until one of its callers sees it (then a
reference in that caller's visible set). Loads are shared by concurrent requests and leave
nothing behind per tenant (``SingleFlight``). Hits, misses, evictions and bytes are served at
``/metrics`` (``toolbay_cache_*{cache="catalog"}``).

Static resource content is not part of a catalog load (platform resources would be held
once per tenant): ``ContentCache`` keeps it per process by (resource, version), bounded by
``TOOLBAY_RESOURCE_CACHE_BYTES``, so a read costs no query once warm either.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings

from mcp_platform.metrics import cache_stats
from mcp_platform.single_flight import SingleFlight
from tenants import auth
from tenants.auth import TenantDirectory, TenantRecord, tenant_directory
from tenants.principal import Principal
from tools_app.catalog.search import SearchIndex
from tools_app.catalog.selectors import (
    CatalogPart,
    CatalogSnapshot,
    platform_catalog,
    resource_content,
    tenant_catalog,
)
from tools_app.catalog.spec import PromptSpec, ResourceSpec, RuleSpec, TemplateSpec, ToolSpec
from tools_app.catalog.visibility import always_visible, confirmation_for, visible_entries, visible_tools

# Visible sets kept per tenant (one per distinct caller: key, OAuth subject, groups, scopes).
MAX_VISIBLE_SETS = 1_000
# A visible set: its dicts, tuples and digests, plus per entry a tuple slot and a dict entry
# (tracemalloc: 2.3 KiB for a caller seeing 20 tools; see tests/tools_app/test_catalog_cache.py).
VISIBLE_SET_BYTES = 1_200
VISIBLE_ENTRY_BYTES = 60
# A tenant's entry itself (TenantTools, its memo dict), besides its own catalog part.
TENANT_ENTRY_BYTES = 1_000


class _Versioned(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def version(self) -> int: ...


def _digest(*groups: Iterable[_Versioned]) -> str:
    parts = ["|".join(f"{e.id}:{e.version}" for e in group) for group in groups]
    return hashlib.sha256("#".join(parts).encode()).hexdigest()


def _tools_digest(tools: Iterable[ToolSpec]) -> str:
    # A tool's revision moves with its row and with its curation (what clients see of it).
    return hashlib.sha256("|".join(f"{t.id}:{t.revision}" for t in tools).encode()).hexdigest()


@dataclass(frozen=True)
class VisibleSet:
    tools: tuple[ToolSpec, ...]
    by_name: dict[str, ToolSpec]
    digest: str  # changes exactly when the listed tools (or their versions or curations) change
    resources: tuple[ResourceSpec, ...] = ()
    resource_by_uri: dict[str, ResourceSpec] = field(default_factory=dict)
    templates: tuple[TemplateSpec, ...] = ()
    template_by_name: dict[str, TemplateSpec] = field(default_factory=dict)
    prompts: tuple[PromptSpec, ...] = ()
    prompt_by_name: dict[str, PromptSpec] = field(default_factory=dict)
    # One fingerprint per list a client can be told has changed ("tools", "resources", "prompts").
    digests: dict[str, str] = field(default_factory=dict)
    # The confirmation policy for this caller of each tool whose rules tighten its own, by name.
    confirmations: dict[str, str] = field(default_factory=dict)
    # Search mode: the tools listed next to the search tool, and the fingerprint of that list.
    pinned: tuple[ToolSpec, ...] = ()
    search_digest: str = ""

    @cached_property
    def search_index(self) -> SearchIndex:
        """The search tool's index over exactly these tools, built on the first search and kept
        as long as this set (until the catalog changes)."""
        return SearchIndex(self.tools)

    def confirmation(self, tool: ToolSpec) -> str:
        return self.confirmations.get(tool.name, tool.confirmation)

    def find_resource(self, uri: str) -> tuple[ResourceSpec | TemplateSpec, dict[str, str]] | None:
        """The resource at ``uri``, or the first template (by name) that matches it, with its variables."""
        resource = self.resource_by_uri.get(uri)
        if resource is not None:
            return resource, {}
        for template in self.templates:
            variables = template.matcher.match(uri)
            if variables is not None:
                return template, variables
        return None


EMPTY = VisibleSet(tools=(), by_name={}, digest="", digests={"tools": "", "resources": "", "prompts": ""})


EMPTY_PART = CatalogPart()


@dataclass(eq=False)
class TenantTools:
    """A tenant's catalog as loaded for one tenant record: the platform's part (shared by every
    tenant) and its own, with the visible set of each caller computed so far."""

    source: TenantRecord
    platform: CatalogPart
    own: CatalogPart
    # Oldest first (a plain dict: an OrderedDict per tenant costs twice as much).
    _visible: dict[tuple[int | None, str, frozenset[str], frozenset[str]], VisibleSet] = field(default_factory=dict)
    nbytes: int = 0  # estimated memory this entry holds beyond the shared platform part

    def __post_init__(self) -> None:
        self.nbytes = TENANT_ENTRY_BYTES + self.own.nbytes

    @classmethod
    def of(cls, source: TenantRecord, snapshot: CatalogSnapshot) -> TenantTools:
        """From one snapshot of everything (tests and tools that hold a ``CatalogSnapshot``)."""
        own = CatalogPart(
            tools=snapshot.tools,
            rules=snapshot.rules,
            resources=snapshot.resources,
            templates=snapshot.templates,
            prompts=snapshot.prompts,
        )
        return cls(source=source, platform=EMPTY_PART, own=own)

    def visible(self, principal: Principal) -> VisibleSet:
        # What rules can tell callers apart by: key, OAuth subject, groups, scopes.
        memo_key = (principal.key_id, principal.oauth_subject, principal.groups, principal.scopes)
        found = self._visible.get(memo_key)
        if found is None:
            platform, own = self.platform, self.own
            rules = platform.rules + own.rules
            tools = tuple(visible_tools(platform.tools + own.tools, rules, principal))
            resources = tuple(visible_entries(platform.resources + own.resources, rules, principal))
            templates = tuple(visible_entries(platform.templates + own.templates, rules, principal))
            prompts = tuple(visible_entries(platform.prompts + own.prompts, rules, principal))
            digest = _tools_digest(tools)
            pinned = tuple(t for t in tools if always_visible(t, rules, principal))
            search_digest = "search:" + _tools_digest(pinned)
            found = VisibleSet(
                tools=tools,
                by_name={t.name: t for t in tools},
                digest=digest,
                resources=resources,
                resource_by_uri={r.uri: r for r in resources},
                templates=templates,
                template_by_name={t.name: t for t in templates},
                prompts=prompts,
                prompt_by_name={p.name: p for p in prompts},
                digests={"tools": digest, "resources": _digest(resources, templates), "prompts": _digest(prompts)},
                confirmations=_tightened(tools, rules, principal),
                pinned=pinned,
                search_digest=search_digest,
            )
            if len(self._visible) >= MAX_VISIBLE_SETS:  # OAuth subjects are many; keep it bounded
                dropped = self._visible.pop(next(iter(self._visible)))
                self.nbytes -= _visible_bytes(dropped)
            self._visible[memo_key] = found
            self.nbytes += _visible_bytes(found)
        elif len(self._visible) > 1:
            self._visible[memo_key] = self._visible.pop(memo_key)  # now the most recently used
        return found


def _tightened(tools: tuple[ToolSpec, ...], rules: tuple[RuleSpec, ...], principal: Principal) -> dict[str, str]:
    """The tools whose confirmation policy rules tighten for this caller (most have none:
    a dict entry per visible tool per caller would be memory for nothing)."""
    found = {}
    for tool in tools:
        policy = confirmation_for(tool, rules, principal)
        if policy != tool.confirmation:
            found[tool.name] = policy
    return found


def _visible_bytes(visible: VisibleSet) -> int:
    entries = len(visible.tools) + len(visible.resources) + len(visible.templates) + len(visible.prompts)
    return VISIBLE_SET_BYTES + VISIBLE_ENTRY_BYTES * entries


@dataclass(frozen=True)
class _PlatformPart:
    part: CatalogPart
    generation: int  # the "all" generation read before its rows
    started: float


class CatalogCache:
    """Tenants' catalogs, least recently used out first past ``max_bytes`` (estimated)."""

    def __init__(self, directory: TenantDirectory, max_bytes: int) -> None:
        self._directory = directory
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, TenantTools] = OrderedDict()
        self._loads: SingleFlight[int, TenantTools] = SingleFlight()
        self._platform: _PlatformPart | None = None
        self._platform_loads: SingleFlight[None, _PlatformPart] = SingleFlight()
        self.stats = cache_stats("catalog")
        self._entry_bytes = 0  # the entries' estimates; the platform part is counted once

    def clear(self) -> None:
        self._entries.clear()
        self._platform = None
        self._entry_bytes = 0
        self._count()

    @property
    def nbytes(self) -> int:
        """Estimated memory held: every tenant's entry, and the platform's part once."""
        return self._entry_bytes + (self._platform.part.nbytes if self._platform is not None else 0)

    def held(self) -> dict[str, int]:
        """How many items each per-process structure holds now (for tests and the benchmark)."""
        return {"entries": len(self._entries), "loads": len(self._loads), "bytes": self.nbytes}

    async def visible(self, principal: Principal) -> VisibleSet:
        """The tools ``principal`` may list and call, ordered by name."""
        tenant = self._directory.cached(principal)
        if tenant is None:
            tenant = await self._directory.tenant(principal.tenant_slug)
            if tenant is None or tenant.tenant_id != principal.tenant_id:
                return EMPTY
        entry = self._entries.get(tenant.tenant_id)
        if entry is not None and entry.source is tenant:
            self._entries.move_to_end(tenant.tenant_id)
            self.stats.hits += 1
        else:
            entry = await self._load(tenant)
        before = entry.nbytes
        found = entry.visible(principal)
        if entry.nbytes != before and self._entries.get(tenant.tenant_id) is entry:
            self._entry_bytes += entry.nbytes - before
            self._evict()
        return found

    async def _load(self, tenant: TenantRecord) -> TenantTools:
        while True:
            entry = await self._loads.run(tenant.tenant_id, partial(self._load_now, tenant))
            if entry.source is tenant:
                return entry
            current = self._entries.get(tenant.tenant_id)
            if current is not None and current.source is tenant:
                return current  # a later request loaded it meanwhile
            # The load this request joined was for an older (or newer) record: load again.

    async def _load_now(self, tenant: TenantRecord) -> TenantTools:
        self.stats.misses += 1
        platform = await self._platform_part(tenant)
        own = await sync_to_async(tenant_catalog)(tenant.tenant_id)
        entry = TenantTools(source=tenant, platform=platform, own=own)
        previous = self._entries.pop(tenant.tenant_id, None)
        if previous is not None:
            self._entry_bytes -= previous.nbytes
        self._entries[tenant.tenant_id] = entry
        self._entry_bytes += entry.nbytes
        self._evict()
        return entry

    async def _platform_part(self, tenant: TenantRecord) -> CatalogPart:
        """The platform's part as of the tenant record's "all" generation or later, loaded
        again past MAX_AGE_SECONDS like the records (the safety net for a missed bump)."""
        every = tenant.generation[0]
        while True:
            current = self._platform
            if (
                current is not None
                and current.generation >= every
                and time.monotonic() - current.started < auth.MAX_AGE_SECONDS
            ):
                return current.part
            asked_at = time.monotonic()
            loaded = await self._platform_loads.run(None, partial(self._load_platform, every))
            if loaded.generation >= every and loaded.started >= asked_at - auth.MAX_AGE_SECONDS:
                return loaded.part

    async def _load_platform(self, every: int) -> _PlatformPart:
        started = time.monotonic()
        part = await sync_to_async(platform_catalog)()
        loaded = _PlatformPart(part, every, started)
        self._platform = loaded
        self._evict()
        return loaded

    def _evict(self) -> None:
        """Drop least recently used tenants, one at a time, until the estimate fits the budget
        (the entry used last stays, even alone over the budget: it is being answered from)."""
        while self.nbytes > self.max_bytes and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._entry_bytes -= dropped.nbytes
            self.stats.evictions += 1
        self._count()

    def _count(self) -> None:
        self.stats.entries = len(self._entries)
        self.stats.bytes = self.nbytes


@dataclass(frozen=True)
class StaticContent:
    text: str
    blob: bytes | None


class ContentCache:
    """Static resource content by (resource id, version), least recently used first out."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, int], StaticContent] = OrderedDict()
        self._bytes = 0

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    async def get(self, resource: ResourceSpec) -> StaticContent | None:
        """The content of that version; None when the row has moved on (the catalog reloads soon)."""
        key = (resource.id, resource.version)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found
        row = await sync_to_async(resource_content)(resource.id, resource.version)
        if row is None:
            return None
        found = StaticContent(*row)
        size = len(found.blob) if found.blob is not None else len(found.text.encode())
        if size <= self._max_bytes:
            self._entries[key] = found
            self._bytes += size
            while self._bytes > self._max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= len(dropped.blob) if dropped.blob is not None else len(dropped.text.encode())
        return found


catalog_cache = CatalogCache(tenant_directory, settings.TOOLBAY_CATALOG_CACHE_BYTES)
content_cache = ContentCache(settings.TOOLBAY_RESOURCE_CACHE_BYTES)
