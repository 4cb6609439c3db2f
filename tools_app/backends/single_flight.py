"""One holder at a time across every process: a Redis lock around work that must not run
twice at once (refreshing a connection's token, fetching a client-credentials token).

Whoever waited re-reads what the holder produced before doing the work itself, so N callers
that arrive together cost one request to the provider, not N.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp_platform.redis_clients import async_redis
from tools_app.backends.base import BackendError

# Longer than a token request can take (TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS is 5 by default).
LOCK_SECONDS = 30


@contextlib.asynccontextmanager
async def one_at_a_time(name: str, *, busy: str, seconds: int = LOCK_SECONDS) -> AsyncIterator[None]:
    """Holds the lock ``toolbay:<name>`` for the block (it lapses after ``seconds`` should the
    holder die). Waits up to ``seconds`` for it, then raises a retryable BackendError(``busy``)."""
    lock = async_redis().lock(f"toolbay:{name}", timeout=seconds, blocking_timeout=seconds)
    if not await lock.acquire():
        raise BackendError(busy, retryable=True)
    try:
        yield
    finally:
        await lock.release()
