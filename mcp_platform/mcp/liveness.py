"""No call without an end: who produces a resumable stream, and whether it still lives.

Every server and worker process *beats*: it keeps ``alive:<process id>`` in Redis with a
time-to-live of ``HEARTBEAT_MISSES`` intervals, renewed every interval. A stream that a
client may resume elsewhere (a POST that went SSE) names its *producer* in Redis: the
process running the call, or the run (a background call) and, once a worker took it, that
worker and the time by which the run must be over. Whoever follows such a stream for a
client (a process a client resumed on, or the POST relaying a background call) checks the
producer whenever it has not for an interval:

- a call whose process died ends with a response the client can act on (``lost_call``),
  written once (the first follower to take the stream over writes it);
- a run whose worker died, or that outlived its deadline, goes to the host, which re-runs
  or fails it; either way the stream gets its end from the run.

So the bound on a call left without an end is ``HEARTBEAT_MISSES + 1`` intervals after its
producer died, and no process needs to know about another's memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.events import EventStore
from mcp_platform.redis_batch import CommandBatch

# A producer is dead once this many intervals passed without a beat.
HEARTBEAT_MISSES = 3

LOST_CALL_TEXT = (
    "The server process running this call stopped before it finished, so its result is lost "
    "(the call may have had partial effects). Call it again if that is safe."
)


def new_process_id(kind: str) -> str:
    """Unique per process start (a pid is reused after a restart)."""
    return f"{kind}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def alive_ttl_ms(interval: float) -> int:
    return max(1, round(interval * HEARTBEAT_MISSES * 1000))


@dataclass(frozen=True)
class Producer:
    """The producer of one stream.

    A call in a server process: ``process`` and the ``request_ids`` the stream owes a
    response to (``tool_call``: they are tools/call requests, which get an error *result*).
    A background call: ``run_id``, and once a worker took it, that worker as ``process`` and
    the run's ``deadline`` (epoch seconds: its timeout and grace after it started)."""

    process: str = ""
    run_id: str = ""
    deadline: float = 0.0
    request_ids: tuple[jsonrpc.RequestId, ...] = ()
    tool_call: bool = False

    def dumps(self) -> bytes:
        return json.dumps(
            {
                "p": self.process,
                "r": self.run_id,
                "d": self.deadline,
                "ids": list(self.request_ids),
                "t": self.tool_call,
            }
        ).encode()

    @classmethod
    def loads(cls, raw: bytes) -> Producer:
        data = json.loads(raw)
        return cls(
            process=data["p"],
            run_id=data["r"],
            deadline=data["d"],
            request_ids=tuple(data["ids"]),
            tool_call=data["t"],
        )


def producer_command(session_id: str, stream_id: str, producer: Producer, ttl_seconds: int) -> tuple[object, ...]:
    return ("SET", names.stream_producer_key(session_id, stream_id), producer.dumps(), "EX", ttl_seconds)


def lost_call(producer: Producer) -> bytes:
    """The final event of a stream whose producing process died: for each request it owed,
    a tool error result (tools/call) or an internal error, retryable by the client."""

    def answer(request_id: jsonrpc.RequestId) -> dict[str, Any]:
        if producer.tool_call:
            return jsonrpc.result(request_id, {"content": [{"type": "text", "text": LOST_CALL_TEXT}], "isError": True})
        return jsonrpc.error(request_id, jsonrpc.JsonRpcError(jsonrpc.INTERNAL_ERROR, LOST_CALL_TEXT))

    answers = [answer(request_id) for request_id in producer.request_ids]
    if not answers:
        return b""  # nothing owed (notifications only): the stream just ends
    return jsonrpc.dumps(answers[0] if len(answers) == 1 else answers)


class Liveness:
    """This process's heartbeat, and the producer records of its streams."""

    def __init__(self, batch: CommandBatch, *, interval: float, kind: str = "web") -> None:
        self.interval = interval
        self.process_id = new_process_id(kind)
        self._batch = batch
        self._beating: asyncio.Task[None] | None = None

    async def ensure_beating(self) -> None:
        """Beat once now (a producer must be alive before anyone can see its streams), then
        keep beating in the background."""
        if self._beating is None or self._beating.done():
            await self._beat()
            self._beating = asyncio.ensure_future(self._beat_forever())

    async def _beat(self) -> None:
        key = names.process_alive_key(self.process_id)
        await self._batch.one("SET", key, b"1", "PX", alive_ttl_ms(self.interval))

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._beat()
            except Exception:  # Redis away for a moment: the next beat tries again
                continue

    async def stop(self) -> None:
        """Stop beating and say so at once (a process on its way out)."""
        if self._beating is not None:
            self._beating.cancel()
            await self._batch.one("DEL", names.process_alive_key(self.process_id))

    async def claim(self, session_id: str, stream_id: str, producer: Producer, ttl_seconds: int) -> None:
        await self.ensure_beating()
        await self._batch.run([producer_command(session_id, stream_id, producer, ttl_seconds)])

    async def producer(self, session_id: str, stream_id: str) -> Producer | None:
        raw = cast(bytes | None, await self._batch.one("GET", names.stream_producer_key(session_id, stream_id)))
        return Producer.loads(raw) if raw is not None else None

    async def alive(self, process_id: str) -> bool:
        return bool(await self._batch.one("EXISTS", names.process_alive_key(process_id)))

    async def take_over(self, session_id: str, stream_id: str) -> bool:
        """Whether this caller is the one to end a dead producer's stream."""
        return bool(await self._batch.one("DEL", names.stream_producer_key(session_id, stream_id)))


class ProducerWatch:
    """What a follower of a stream does every interval: end it if its producer died."""

    def __init__(
        self, liveness: Liveness, events: EventStore, recover_run: Callable[[str, str], Awaitable[None]]
    ) -> None:
        self.liveness = liveness
        self._events = events
        self._recover_run = recover_run

    @property
    def interval(self) -> float:
        return self.liveness.interval

    async def check(self, session_id: str, stream_id: str) -> None:
        producer = await self.liveness.producer(session_id, stream_id)
        if producer is None or not producer.process:
            return  # no record (a JSON answer, expired) or a run still queued: nothing to judge
        if producer.run_id:
            overdue = producer.deadline and time.time() > producer.deadline
            if overdue or not await self.liveness.alive(producer.process):
                await self._recover_run(producer.run_id, producer.process)
            return
        if await self.liveness.alive(producer.process):
            return
        if await self.liveness.take_over(session_id, stream_id):
            await self._events.append(session_id, stream_id, lost_call(producer), final=True)
