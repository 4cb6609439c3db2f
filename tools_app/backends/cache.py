"""Per-process caches of backend state (decrypted secrets, upstream server settings).

The same rule as the catalog cache (``tools_app.catalog``): a write bumps one Redis
counter after its transaction commits, and a lookup compares the counter (one Redis round
trip) before trusting what the process holds. A call of an HTTP or upstream tool thus
costs no database query once warm, and a rotated secret is used by every process on its
next call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from asgiref.sync import sync_to_async
from django.db import transaction

from mcp_platform.redis_clients import async_redis, sync_redis

GENERATION_KEY = "toolbay:backends:gen"
MAX_ENTRIES = 10_000

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _bump() -> None:
    sync_redis().incr(GENERATION_KEY)


def backend_state_changed() -> None:
    """Record that a secret or an upstream server changed (published after commit)."""
    transaction.on_commit(_bump)


class GenerationCache(Generic[K, V]):
    """Values loaded by ``loader`` (sync, may query the database), dropped when the
    backend generation moves. A loader returning None is not cached."""

    def __init__(self, loader: Callable[[K], V | None]) -> None:
        self._loader = loader
        self._generation: int | None = None
        self._entries: dict[K, V] = {}

    def clear(self) -> None:
        self._entries.clear()
        self._generation = None

    async def get(self, key: K) -> V | None:
        generation = int(await async_redis().get(GENERATION_KEY) or 0)
        if generation != self._generation:
            self._entries.clear()
            self._generation = generation
        if key in self._entries:
            return self._entries[key]
        # The generation was read before the load: a write committed meanwhile moves it
        # again and the next lookup reloads.
        value = await sync_to_async(self._loader)(key)
        if value is not None and self._generation == generation:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = value
        return value
