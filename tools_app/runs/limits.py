"""Per-tenant call limits (Tenant.calls_per_minute, Tenant.max_concurrent_calls), in Redis so
they hold across every process. Tenants without limits cost nothing here.

Both counters are checked by one Lua script, one command on the call path: the minute's
call count goes up (refused calls count too), and a concurrency slot is taken only when
both limits allow the call.

An ``Admission`` sends that command before anyone waits for it, so that it shares a round
trip with the request's credential check (``tools_app.runs.host``): a sequential caller's
call then waits for Redis twice (that check, and the end of the call), not three times.
An admission no call used is given back (``give_back``): the slot, and the count.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from mcp_platform.redis_batch import Command
from mcp_platform.redis_clients import command_batch
from tenants.auth import TenantRecord

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


def _acquire_command(keys: tuple[str, str], per_minute: int | None, concurrent: int | None) -> Command:
    limits = (-1 if per_minute is None else per_minute, -1 if concurrent is None else concurrent)
    return ("EVALSHA", _ACQUIRE_SHA, 2, *keys, *limits, CONCURRENCY_SLOT_TTL)


def _keys(tenant_id: int) -> tuple[str, str]:
    return (f"{PREFIX}:rate:{tenant_id}:{int(time.time() // 60)}", running_key(tenant_id))


def _verdict(reply: list[int], per_minute: int | None, concurrent: int | None) -> bool:
    """The script's reply as ``acquire`` returns it (whether a slot was taken), or LimitExceeded."""
    _, running, allowed = reply
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


async def acquire(tenant_id: int, *, per_minute: int | None, concurrent: int | None) -> bool:
    """Take a call slot; raises LimitExceeded. Returns whether a concurrency slot was taken
    (then ``release_command`` must follow)."""
    if per_minute is None and concurrent is None:
        return False
    command = _acquire_command(_keys(tenant_id), per_minute, concurrent)
    batch = command_batch()
    try:
        reply = await batch.one(*command)
    except NoScriptError:
        # First use since Redis started: EVAL loads the script (EVALSHA finds it from then on).
        reply = await batch.one("EVAL", _ACQUIRE, *command[2:])
    return _verdict(reply, per_minute, concurrent)


@dataclass(eq=False)
class Admission:
    """A call's limits, checked ahead of the call: the script is on its way when this exists.
    ``tenant`` is the record the limits were read from; a call may use the admission only
    while that record is its tenant's current one."""

    tenant: TenantRecord
    keys: tuple[str, str]
    reply: asyncio.Future[list[Any]]
    used: bool = field(default=False)

    async def take(self) -> bool | None:
        """The verdict, as ``acquire`` gives it (LimitExceeded raised); None when the script
        did not run (Redis had not loaded it yet): acquire as usual then."""
        self.used = True
        (reply,) = await self.reply
        if isinstance(reply, NoScriptError):
            return None
        if isinstance(reply, Exception):
            raise reply
        return _verdict(reply, self.tenant.calls_per_minute, self.tenant.max_concurrent_calls)


def admit(tenant: TenantRecord) -> Admission:
    """Send the limits' check of a call of ``tenant`` (which has limits) that is about to come."""
    keys = _keys(tenant.tenant_id)
    command = _acquire_command(keys, tenant.calls_per_minute, tenant.max_concurrent_calls)
    return Admission(tenant, keys, command_batch().run([command]))


def give_back(admission: Admission) -> None:
    """Undo an admission no call used, once its reply is in: the minute's count goes down
    (a request that was no call, or not allowed one, is not counted) and a slot it took
    is freed. Nothing waits for it; with the reply in, the undo is queued at once."""
    if admission.used:
        return
    admission.used = True
    if admission.reply.done():
        _undo(admission, admission.reply)
    else:
        admission.reply.add_done_callback(functools.partial(_undo, admission))


def _undo(admission: Admission, reply: asyncio.Future[list[Any]]) -> None:
    if reply.cancelled() or reply.exception() is not None:
        return  # the script's fate is unknown: a slot it took frees itself (CONCURRENCY_SLOT_TTL)
    (answer,) = reply.result()
    if isinstance(answer, Exception):
        return  # it did not run
    commands: list[Command] = []
    if admission.tenant.calls_per_minute is not None:
        commands.append(("DECR", admission.keys[0]))
    if answer[2] and admission.tenant.max_concurrent_calls is not None:
        commands.append(("DECR", admission.keys[1]))
    if commands:
        command_batch().send(commands)


def release_command(tenant_id: int) -> Command:
    """Gives back the call slot ``acquire`` took (sent with the caller's end-of-call commands)."""
    return ("DECR", running_key(tenant_id))
