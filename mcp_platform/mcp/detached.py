"""Work that must finish although the request that started it is done."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

# The event loop keeps only weak references to tasks; these are kept until they end.
_detached: set[asyncio.Task[Any]] = set()


def detach(coro: Awaitable[Any]) -> None:
    task = asyncio.ensure_future(coro)
    _detached.add(task)
    task.add_done_callback(_detached.discard)
