"""The hot-path catalog: which tools each caller sees, cached per process.

It follows the tenant records of ``tenants.auth.TenantDirectory``: every request has just
authenticated, which checked the tenant's generation (the one Redis round trip), so the
tools and rules loaded for that record are current, and a new record (the generation
moved) means loading them again. No database query while warm; what a credential sees is
computed once per catalog load and kept.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

from tenants.auth import TenantDirectory, TenantRecord, tenant_directory
from tenants.principal import Principal
from tools_app.catalog.selectors import catalog_snapshot
from tools_app.catalog.spec import RuleSpec, ToolSpec
from tools_app.catalog.visibility import visible_tools

MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class VisibleSet:
    tools: tuple[ToolSpec, ...]
    by_name: dict[str, ToolSpec]
    digest: str  # changes exactly when the listed tools (or their versions) change


EMPTY = VisibleSet(tools=(), by_name={}, digest="")


@dataclass
class TenantTools:
    """A tenant's tools and rules as loaded for one tenant record."""

    source: TenantRecord
    tools: tuple[ToolSpec, ...]
    rules: tuple[RuleSpec, ...]
    _visible: dict[tuple[int | None, str, frozenset[str], frozenset[str]], VisibleSet] = field(default_factory=dict)

    def visible(self, principal: Principal) -> VisibleSet:
        # What rules can tell callers apart by: key, OAuth subject, groups, scopes.
        memo_key = (principal.key_id, principal.oauth_subject, principal.groups, principal.scopes)
        found = self._visible.get(memo_key)
        if found is None:
            tools = tuple(visible_tools(self.tools, self.rules, principal))
            digest = hashlib.sha256("|".join(f"{t.id}:{t.version}" for t in tools).encode()).hexdigest()
            found = VisibleSet(tools=tools, by_name={t.name: t for t in tools}, digest=digest)
            if len(self._visible) >= MAX_ENTRIES:  # OAuth subjects are many; keep it bounded
                self._visible.clear()
            self._visible[memo_key] = found
        return found


class CatalogCache:
    def __init__(self, directory: TenantDirectory) -> None:
        self._directory = directory
        self._entries: dict[int, TenantTools] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    def clear(self) -> None:
        self._entries.clear()

    async def visible(self, principal: Principal) -> VisibleSet:
        """The tools ``principal`` may list and call, ordered by name."""
        tenant = self._directory.cached(principal)
        if tenant is None:
            tenant = await self._directory.tenant(principal.tenant_slug)
            if tenant is None or tenant.tenant_id != principal.tenant_id:
                return EMPTY
        entry = self._entries.get(tenant.tenant_id)
        if entry is None or entry.source is not tenant:
            entry = await self._reload(tenant)
        return entry.visible(principal)

    async def _reload(self, tenant: TenantRecord) -> TenantTools:
        lock = self._locks.setdefault(tenant.tenant_id, asyncio.Lock())
        async with lock:
            current = self._entries.get(tenant.tenant_id)
            if current is not None and current.source is tenant:
                return current  # another request loaded it while we waited
            snapshot = await sync_to_async(catalog_snapshot)(tenant.tenant_id)
            entry = TenantTools(source=tenant, tools=snapshot.tools, rules=snapshot.rules)
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[tenant.tenant_id] = entry
            return entry


catalog_cache = CatalogCache(tenant_directory)
