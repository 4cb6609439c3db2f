"""Concurrent loads of one key share one load, and nothing is kept per key once it is done.

The caches of the hot path (tenant records, catalogs, OAuth settings) load a missing or stale
entry once however many requests want it at the same moment. A lock per key did that too, but
stayed in memory for every key ever asked for (every slug a scanner tried); a running load is
forgotten the moment it ends.

The load runs as a task of its own: a caller that gives up (its client went away) does not
cancel it for the others, and what it loads is still stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        """Loads running now (what this holds in memory)."""
        return len(self._running)

    async def run(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        """The result of the load of ``key`` running now, else of ``load()`` started now.

        A caller that needs what was committed after a given moment must check the result: a
        load it joined may have started before that moment.
        """
        running = self._running.get(key)
        if running is None or running.done():
            running = asyncio.ensure_future(load())
            self._running[key] = running
            running.add_done_callback(partial(self._finished, key))
        return await asyncio.shield(running)

    def _finished(self, key: K, done: asyncio.Future[V]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled():
            done.exception()  # retrieved: its waiters raise it; asyncio need not log it as lost
