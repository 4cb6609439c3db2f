"""Per-tenant call limits (Tenant.calls_per_minute, Tenant.max_concurrent_calls), in Redis so
they hold across every process. Tenants without limits cost nothing here."""

from __future__ import annotations

import time

from redis.asyncio.client import Pipeline

from mcp_platform.redis_clients import async_redis

PREFIX = "toolbay:limits"
# A slot of a process that died mid-call frees itself after this long.
CONCURRENCY_SLOT_TTL = 3600


class LimitExceeded(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def acquire(tenant_id: int, *, per_minute: int | None, concurrent: int | None) -> bool:
    """Take a call slot; raises LimitExceeded. Returns whether a concurrency slot was taken
    (then ``release`` must follow)."""
    if per_minute is None and concurrent is None:
        return False
    redis = async_redis()
    minute = int(time.time() // 60)
    pipe = redis.pipeline(transaction=False)
    if per_minute is not None:
        pipe.incr(f"{PREFIX}:rate:{tenant_id}:{minute}")
        pipe.expire(f"{PREFIX}:rate:{tenant_id}:{minute}", 120)
    if concurrent is not None:
        pipe.incr(f"{PREFIX}:running:{tenant_id}")
        pipe.expire(f"{PREFIX}:running:{tenant_id}", CONCURRENCY_SLOT_TTL)
    results = await pipe.execute()
    if concurrent is not None:
        running = results[-2]
        if running > concurrent:
            await redis.decr(f"{PREFIX}:running:{tenant_id}")
            raise LimitExceeded(
                f"Too many calls at once: this tenant allows {concurrent} running calls. Retry when one has finished."
            )
    if per_minute is not None and results[0] > per_minute:
        if concurrent is not None:
            await redis.decr(f"{PREFIX}:running:{tenant_id}")
        raise LimitExceeded(
            f"Rate limit reached: this tenant allows {per_minute} calls per minute. "
            f"Retry in {60 - int(time.time() % 60)} seconds."
        )
    return concurrent is not None


def queue_release(pipe: Pipeline, tenant_id: int) -> None:
    """Give back the call slot ``acquire`` took, as part of the caller's end-of-call pipeline."""
    pipe.decr(f"{PREFIX}:running:{tenant_id}")
