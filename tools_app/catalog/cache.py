"""The hot-path catalog: which tools, resources, templates and prompts each caller sees,
cached per process, and the static content of resources.

It follows the tenant records of ``tenants.auth.TenantDirectory``: every request has just
authenticated, which checked the tenant's generation (the one Redis round trip), so the
tools and rules loaded for that record are current, and a new record (the generation
moved) means loading them again. No database query while warm; what a credential sees is
computed once per catalog load and kept.

Static resource content is not part of a catalog load (platform resources would be held
once per tenant): ``ContentCache`` keeps it per process by (resource, version), bounded by
``TOOLBAY_RESOURCE_CACHE_BYTES``, so a read costs no query once warm either.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings

from tenants.auth import TenantDirectory, TenantRecord, tenant_directory
from tenants.principal import Principal
from tools_app.catalog.search import SearchIndex
from tools_app.catalog.selectors import CatalogSnapshot, catalog_snapshot, resource_content
from tools_app.catalog.spec import PromptSpec, ResourceSpec, RuleSpec, TemplateSpec, ToolSpec
from tools_app.catalog.visibility import always_visible, confirmation_for, visible_entries, visible_tools

MAX_ENTRIES = 10_000


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
    # The confirmation policy of each tool for this caller, by name (rules may tighten the tool's).
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


@dataclass
class TenantTools:
    """A tenant's catalog and rules as loaded for one tenant record."""

    source: TenantRecord
    tools: tuple[ToolSpec, ...]
    rules: tuple[RuleSpec, ...]
    resources: tuple[ResourceSpec, ...] = ()
    templates: tuple[TemplateSpec, ...] = ()
    prompts: tuple[PromptSpec, ...] = ()
    _visible: dict[tuple[int | None, str, frozenset[str], frozenset[str]], VisibleSet] = field(default_factory=dict)

    @classmethod
    def of(cls, source: TenantRecord, snapshot: CatalogSnapshot) -> TenantTools:
        return cls(
            source=source,
            tools=snapshot.tools,
            rules=snapshot.rules,
            resources=snapshot.resources,
            templates=snapshot.templates,
            prompts=snapshot.prompts,
        )

    def visible(self, principal: Principal) -> VisibleSet:
        # What rules can tell callers apart by: key, OAuth subject, groups, scopes.
        memo_key = (principal.key_id, principal.oauth_subject, principal.groups, principal.scopes)
        found = self._visible.get(memo_key)
        if found is None:
            tools = tuple(visible_tools(self.tools, self.rules, principal))
            resources = tuple(visible_entries(self.resources, self.rules, principal))
            templates = tuple(visible_entries(self.templates, self.rules, principal))
            prompts = tuple(visible_entries(self.prompts, self.rules, principal))
            digest = _tools_digest(tools)
            pinned = tuple(t for t in tools if always_visible(t, self.rules, principal))
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
                confirmations={t.name: confirmation_for(t, self.rules, principal) for t in tools},
                pinned=pinned,
                search_digest=search_digest,
            )
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
            entry = TenantTools.of(tenant, snapshot)
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[tenant.tenant_id] = entry
            return entry


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


catalog_cache = CatalogCache(tenant_directory)
content_cache = ContentCache(settings.TOOLBAY_RESOURCE_CACHE_BYTES)
