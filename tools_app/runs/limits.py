"""Per-tenant call limits (Tenant.calls_per_minute, Tenant.max_concurrent_calls), in Redis so
they hold across every process. Tenants without limits cost nothing here.

Both counters are checked by one Lua script, one command on the call path: the minute's
call count goes up (refused calls count too), and a concurrency slot is taken only when
both limits allow the call.
"""

from __future__ import annotations

import hashlib
import time

from redis.exceptions import NoScriptError

from mcp_platform.redis_batch import Command
from mcp_platform.redis_clients import command_batch

PREFIX = "toolbay:limits"
# A slot of a process that died mid-call frees itself after this long.
CONCURRENCY_SLOT_TTL = 3600

# KEYS: the minute's rate counter, the running counter. ARGV: per-minute limit, concurrency
# limit (-1: none), slot TTL. Returns {calls this minute, running calls, 1 if allowed else 0}.
_ACQUIRE = """
local rate, running = 0, 0
local per_minute, concurrent = tonumber(ARGV[1]), tonumber(ARGV[2])
if per_minute >= 0 then
  rate = redis.call('INCR', KEYS[1])
  if rate == 1 then redis.call('EXPIRE', KEYS[1], 120) end
end
if concurrent >= 0 then
  running = redis.call('INCR', KEYS[2])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  if running > concurrent or (per_minute >= 0 and rate > per_minute) then
    redis.call('DECR', KEYS[2])
    return {rate, running, 0}
  end
elseif rate > per_minute then
  return {rate, running, 0}
end
return {rate, running, 1}
"""
_ACQUIRE_SHA = hashlib.sha1(_ACQUIRE.encode()).hexdigest()


class LimitExceeded(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def running_key(tenant_id: int) -> str:
    return f"{PREFIX}:running:{tenant_id}"


async def acquire(tenant_id: int, *, per_minute: int | None, concurrent: int | None) -> bool:
    """Take a call slot; raises LimitExceeded. Returns whether a concurrency slot was taken
    (then ``release_command`` must follow)."""
    if per_minute is None and concurrent is None:
        return False
    keys = (f"{PREFIX}:rate:{tenant_id}:{int(time.time() // 60)}", running_key(tenant_id))
    limits = (-1 if per_minute is None else per_minute, -1 if concurrent is None else concurrent)
    batch = command_batch()
    try:
        _, running, allowed = await batch.one("EVALSHA", _ACQUIRE_SHA, 2, *keys, *limits, CONCURRENCY_SLOT_TTL)
    except NoScriptError:
        # First use since Redis started: EVAL loads the script (EVALSHA finds it from then on).
        _, running, allowed = await batch.one("EVAL", _ACQUIRE, 2, *keys, *limits, CONCURRENCY_SLOT_TTL)
    if allowed:
        return concurrent is not None
    if concurrent is not None and running > concurrent:
        raise LimitExceeded(
            f"Too many calls at once: this tenant allows {concurrent} running calls. Retry when one has finished."
        )
    raise LimitExceeded(
        f"Rate limit reached: this tenant allows {per_minute} calls per minute. "
        f"Retry in {60 - int(time.time() % 60)} seconds."
    )


def release_command(tenant_id: int) -> Command:
    """Gives back the call slot ``acquire`` took (sent with the caller's end-of-call commands)."""
    return ("DECR", running_key(tenant_id))
