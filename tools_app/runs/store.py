"""A run's live state in Redis; its row is written behind (``tools_app.runs.writer``).

A background call's path touches no database: the run is accepted into a Redis hash
(``toolbay:run:<id>``), every change of state is a conditional script on that hash, and
each change appends the run's whole state (with its version) to the stream
``CHANGES_KEY`` in the same script. The ``audit_writer`` process upserts those states into
``ToolRun`` rows, never letting an older version overwrite a newer one, and acknowledges an
entry only after its commit: as for the invocation journal, a run accepted is in Redis
before the client hears of it and survives the death of any process (Redis itself keeps it
with its append-only file, as the compose file configures it).

While a run's hash exists it is the truth: every transition is decided there (exactly one
party records an outcome), and every reader asks it first. The hash of an ended run expires
``WRITTEN_GRACE_SECONDS`` after the writer stored its final state; from then on the row,
which holds the same state, answers. A run known only to the database (Redis lost its
data, or a row from before this store) is copied back into Redis before it changes.
Runs not yet written are indexed in ``UNWRITTEN_KEY``, so listings (tasks/list, the
recovery sweeps) merge them with the rows.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, FieldT

from mcp_platform.redis_batch import Command, checked, hash_reply
from mcp_platform.redis_clients import async_redis, command_batch
from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.models import ToolRun

RUN_PREFIX = "toolbay:run:"
CHANGES_KEY = "toolbay:runs:changes"
UNWRITTEN_KEY = "toolbay:runs:unwritten"
# An ended run's hash outlives its written row by this much: the relay and tasks/result
# read it right after the end, and need not wait for the writer.
WRITTEN_GRACE_SECONDS = 60
ANY_WORKER = "*"  # worker ids are never "*"

# The fields set once, when the run is accepted (one JSON value in the hash).
FIXED = (
    "tenant_id",
    "subject",
    "credential_label",
    "oauth_subject",
    "oauth_client",
    "oauth_issuer",
    "grant_id",
    "tool_id",
    "tool_name",
    "tool_version",
    "arguments",
    "is_task",
    "session_id",
    "protocol_version",
    "stream_id",
    "request_id",
    "progress_token",
    "client_capabilities",
    "confirmation",
    "log_level",
    "ttl_ms",
)
JSON_STATE = ("result", "error", "input_responses", "input_requests")
TIME_STATE = ("created_at", "updated_at", "started_at", "finished_at", "expires_at")

# KEYS: the run, the changes stream, the unwritten index. ARGV: the statuses it must be in
# ("" any), the worker it must name (ANY_WORKER any), the version it must have ("" any),
# "1" to count an attempt, the time, the number n of items that follow as field/value pairs
# to set, those n items, then the commands to run once the change is made (each as its
# length and its words): whoever records an outcome delivers it in the same script, so a
# change costs its party one round trip and no other party can deliver it.
_TRANSITION = """
local run = KEYS[1]
if redis.call('EXISTS', run) == 0 then return -1 end
if ARGV[1] ~= '' and not string.find(',' .. ARGV[1] .. ',', ',' .. redis.call('HGET', run, 'status') .. ',', 1, true)
  then return 0 end
if ARGV[2] ~= '*' and redis.call('HGET', run, 'worker_id') ~= ARGV[2] then return 0 end
if ARGV[3] ~= '' and redis.call('HGET', run, 'v') ~= ARGV[3] then return 0 end
if ARGV[4] == '1' then redis.call('HINCRBY', run, 'attempts', 1) end
local n = tonumber(ARGV[6])
if n > 0 then redis.call('HSET', run, unpack(ARGV, 7, 6 + n)) end
redis.call('HSET', run, 'updated_at', ARGV[5])
local v = redis.call('HINCRBY', run, 'v', 1)
local state = redis.call('HGETALL', run)
local entry = {}
for i = 1, #state, 2 do
  if state[i] ~= 'spec' then entry[#entry + 1] = state[i]; entry[#entry + 1] = state[i + 1] end
end
redis.call('XADD', KEYS[2], '*', unpack(entry))
redis.call('ZADD', KEYS[3], ARGV[5], redis.call('HGET', run, 'id'))
local i = 7 + n
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + count))
  i = i + count + 1
end
return v
"""
_TRANSITION_SHA = hashlib.sha1(_TRANSITION.encode()).hexdigest()

# KEYS: the run. ARGV: field/value pairs. A run known only to the database, copied back.
_RESTORE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS: the unwritten index. ARGV: the grace in ms, then run id/version pairs the writer
# committed. A run whose newest state is written leaves the index; an ended one expires.
_WRITTEN = (
    """
for i = 2, #ARGV - 1, 2 do
  local run = '"""
    + RUN_PREFIX
    + """' .. ARGV[i]
  local v = redis.call('HGET', run, 'v')
  if not v or tonumber(v) <= tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    local status = redis.call('HGET', run, 'status')
    if status and status ~= 'working' and status ~= 'input_required' then
      redis.call('PEXPIRE', run, ARGV[1])
    end
  end
end
return 0
"""
)


def run_key(run_id: str) -> str:
    return RUN_PREFIX + run_id


def _epoch(value: datetime | None) -> str:
    return repr(value.timestamp()) if value is not None else ""


def _when(value: bytes | str | None) -> datetime | None:
    return datetime.fromtimestamp(float(value), UTC) if value else None


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


Fields = dict[FieldT, EncodableT]


def hash_of(run: ToolRun, spec: ToolSpec | None) -> Fields:
    """The hash of a run (a new one, or a row copied back)."""
    state: Fields = {
        "id": run.id,
        "fixed": _json({name: getattr(run, name) for name in FIXED}),
        "status": run.status,
        "status_message": run.status_message,
        "attempts": run.attempts,
        "worker_pid": "" if run.worker_pid is None else run.worker_pid,
        "worker_id": run.worker_id,
        "v": run.version,
    }
    state.update({name: _json(getattr(run, name)) for name in JSON_STATE})
    state.update({name: _epoch(getattr(run, name)) for name in TIME_STATE})
    if spec is not None:
        state["spec"] = _json(spec.to_json())
    return state


def run_from(state: dict[bytes, bytes]) -> ToolRun:
    """The run a hash (or a change entry) holds, as an unsaved-looking ``ToolRun``."""
    fields: dict[str, Any] = orjson.loads(state[b"fixed"])
    fields.update({name: orjson.loads(state[name.encode()]) for name in JSON_STATE})
    fields.update({name: _when(state.get(name.encode())) for name in TIME_STATE})
    pid = state.get(b"worker_pid")
    run = ToolRun(
        id=state[b"id"].decode(),
        status=state[b"status"].decode(),
        status_message=state[b"status_message"].decode(),
        attempts=int(state[b"attempts"]),
        worker_pid=int(pid) if pid else None,
        worker_id=state[b"worker_id"].decode(),
        version=int(state[b"v"]),
        **fields,
    )
    run._state.adding, run._state.db = False, "default"
    spec = state.get(b"spec")
    run.spec = ToolSpec.from_json(orjson.loads(spec)) if spec else None
    return run


def _redis() -> Redis:
    return async_redis()


async def create(run: ToolRun, spec: ToolSpec | None, also: Sequence[Command] = ()) -> None:
    """Accept a run: its hash, its first change entry and its place among the unwritten, at
    once, in one transaction with ``also`` (the message that queues it)."""
    state = hash_of(run, spec)
    key = run_key(run.id)
    commands: list[Command] = [("MULTI",), ("HSET", key, *[item for pair in state.items() for item in pair])]
    if run.expires_at is not None:  # the row is purged then too (purge_expired_runs)
        commands.append(("PEXPIREAT", key, int(run.expires_at.timestamp() * 1000) + WRITTEN_GRACE_SECONDS * 1000))
    entry = [item for name, value in state.items() if name != "spec" for item in (name, value)]
    commands += [("XADD", CHANGES_KEY, "*", *entry), ("ZADD", UNWRITTEN_KEY, repr(time.time()), run.id), *also]
    commands.append(("EXEC",))
    # Through this loop's command batch (one write, replies parsed by hiredis): MULTI and
    # EXEC keep the group one transaction, and the batch never splits a caller's group.
    executed = checked(await command_batch().run(commands))[-1]
    checked(executed)


async def load(run_id: str) -> ToolRun | None:
    """The run as it is now: its hash, or its row once the hash is gone."""
    state = await command_batch().one("HGETALL", run_key(run_id))
    if state:
        return run_from(hash_reply(state))
    run = await ToolRun.objects.filter(pk=run_id).afirst()
    if run is not None:
        run.spec = None
    return run


async def load_many(run_ids: Iterable[str]) -> dict[str, ToolRun]:
    """Those of these runs that exist, each as it is now (one round trip, one query)."""
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return {}
    states = checked(await command_batch().run([("HGETALL", run_key(run_id)) for run_id in ids]))
    found = {run_id: run_from(hash_reply(state)) for run_id, state in zip(ids, states, strict=True) if state}
    missing = [run_id for run_id in ids if run_id not in found]
    if missing:
        async for run in ToolRun.objects.filter(pk__in=missing):
            run.spec = None
            found[run.id] = run
    return found


async def unwritten_ids() -> list[str]:
    """Runs whose newest state is not in the database yet (few, while a writer runs)."""
    members = cast(list[bytes], await _redis().zrange(UNWRITTEN_KEY, 0, -1))
    return [member.decode() for member in members]


async def transition(
    run_id: str,
    changes: dict[str, Any],
    *,
    statuses: Iterable[str] = (),
    worker: str = ANY_WORKER,
    version: int | None = None,
    count_attempt: bool = False,
    before: Sequence[Command] = (),
    then: Sequence[Command] = (),
) -> int:
    """Change the run if it is in one of ``statuses`` (any, when empty), names ``worker`` and
    has ``version`` (when given); returns its new version, 0 when a condition failed or the
    run does not exist.

    ``changes``: model field names and their values. A run known only to the database is
    first copied back into Redis (unless it has ended: an ended run never changes).
    ``before``: commands sent ahead of the change in the same round trip (Redis runs them
    first whatever becomes of it); ``then``: commands run by the change's own script, only
    when the change is made.
    """
    fields: list[Any] = []
    for name, value in changes.items():
        if name in JSON_STATE:
            value = _json(value)
        elif name in TIME_STATE:
            value = _epoch(value)
        elif value is None:
            value = ""
        fields.extend((name, value))
    args: list[Any] = [
        ",".join(statuses),
        worker,
        "" if version is None else str(version),
        "1" if count_attempt else "0",
        repr(time.time()),
        len(fields),
        *fields,
    ]
    for command in then:
        args.extend((len(command), *command))
    keys = (run_key(run_id), CHANGES_KEY, UNWRITTEN_KEY)
    batch = command_batch()
    # EVALSHA through the batch: the script's text goes to Redis once (EVAL loads it after
    # a NOSCRIPT, e.g. a restarted Redis), and ``before`` shares the change's round trip.
    replies = await batch.run([*before, ("EVALSHA", _TRANSITION_SHA, len(keys), *keys, *args)])
    *ahead, answer = replies
    checked(ahead)
    if isinstance(answer, NoScriptError):
        answer = await batch.one("EVAL", _TRANSITION, len(keys), *keys, *args)
    elif isinstance(answer, Exception):
        raise answer
    if int(answer) >= 0:
        return int(answer)
    row = await ToolRun.objects.filter(pk=run_id).afirst()
    if row is None or row.is_terminal:
        return 0
    flat = [item for pair in hash_of(row, None).items() for item in pair]
    await batch.one("EVAL", _RESTORE, 1, run_key(run_id), *flat)
    return max(int(await batch.one("EVALSHA", _TRANSITION_SHA, len(keys), *keys, *args)), 0)


def written(client: Any, versions: dict[str, int]) -> None:
    """The writer committed these runs at these versions (sync: the writer is a thread)."""
    flat = [item for pair in versions.items() for item in pair]
    client.register_script(_WRITTEN)([UNWRITTEN_KEY], [WRITTEN_GRACE_SECONDS * 1000, *flat])


async def forget(run_ids: Iterable[str]) -> None:
    """Runs purged from the database (past their TTL) end here too."""
    keys = [run_key(run_id) for run_id in run_ids]
    if keys:
        await _redis().delete(*keys)


async def spec_of(run: ToolRun) -> ToolSpec | None:
    """The tool the run runs: the one it was accepted for, or (a run read from its row) the
    tool as it is now; None when it was deleted."""
    if run.spec is not None:
        return run.spec
    if run.tool_id is None:
        return None
    tool = await Tool.objects.select_related("curation").filter(pk=run.tool_id).afirst()
    return ToolSpec.from_model(tool) if tool is not None else None
