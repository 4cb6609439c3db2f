"""Work that must finish although the request that started it is done."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger(__name__)

# The event loop keeps only weak references to tasks; these are kept until they end.
_detached: set[asyncio.Task[Any]] = set()


def detach(coro: Awaitable[Any]) -> None:
    task = asyncio.ensure_future(coro)
    _detached.add(task)
    task.add_done_callback(_ended)


def _ended(task: asyncio.Task[Any]) -> None:
    """Forget the task; a failure is logged here, as one warning naming the work, since nobody
    awaits it (asyncio would report it as "Task exception was never retrieved" when the task
    is collected, e.g. for every in-flight call's clean-up while Redis is away)."""
    _detached.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.warning("detached %s failed: %s", task.get_coro(), error, exc_info=error)
