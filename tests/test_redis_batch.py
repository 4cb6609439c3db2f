"""The hot path's multiplexed Redis connection (mcp_platform/redis_batch.py), on real Redis.

Replies come back to their own caller in order however many callers share the connection;
an error reply is that caller's alone; a connection Redis drops fails only what was in
flight, and the next command reconnects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from django.conf import settings
from redis.exceptions import ConnectionError, ResponseError

from mcp_platform.redis_batch import CommandBatch

KEY = "toolbay-test:batch"


def _run(scenario: Any) -> Any:
    async def main() -> Any:
        batch = CommandBatch(settings.REDIS_URL, timeout_seconds=5)
        try:
            return await scenario(batch)
        finally:
            batch.close()

    return asyncio.run(main())


@pytest.fixture(autouse=True)
def _clean() -> Any:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(KEY)
    yield client
    client.delete(KEY)
    client.close()


def test_many_callers_each_get_their_own_replies_in_order():
    async def scenario(batch: CommandBatch) -> list[list[Any]]:
        async def caller(n: int) -> list[Any]:
            return await batch.run([("SET", f"{KEY}:{n}", n, "EX", 30), ("INCR", f"{KEY}:{n}"), ("GET", f"{KEY}:{n}")])

        return await asyncio.gather(*(caller(n) for n in range(500)))

    answers = _run(scenario)
    assert answers == [[b"OK", n + 1, str(n + 1).encode()] for n in range(500)]


def test_an_error_reply_belongs_to_its_caller_only():
    async def scenario(batch: CommandBatch) -> tuple[Any, Any, Any]:
        await batch.one("SET", KEY, "text", "EX", 30)
        return await asyncio.gather(
            batch.run([("INCR", KEY), ("GET", KEY)]),
            batch.one("EXISTS", KEY),
            batch.one("INCR", KEY),
            return_exceptions=True,
        )

    both, exists, failed = _run(scenario)
    assert isinstance(both[0], ResponseError) and both[1] == b"text"
    assert exists == 1
    assert isinstance(failed, ResponseError) and "not an integer" in str(failed)


def test_commands_queued_while_redis_answers_go_out_together():
    async def scenario(batch: CommandBatch) -> int:
        writes = 0
        await batch.one("PING")  # connected
        transport = batch._transport
        assert transport is not None
        real_write = transport.write

        def counting_write(data: bytes) -> None:
            nonlocal writes
            writes += 1
            real_write(data)

        transport.write = counting_write  # type: ignore[method-assign]
        first = batch.run([("PING",)])  # goes out at the end of this loop turn
        await asyncio.sleep(0)  # one loop turn: the PING is written, so the next commands queue behind it
        later = [batch.run([("INCR", KEY)]) for _ in range(50)]  # wait for its reply, then one write
        await asyncio.gather(first, *later)
        return writes

    assert _run(scenario) == 2


def test_a_dropped_connection_fails_what_was_in_flight_and_the_next_command_reconnects(_clean):
    async def first_ping_after_the_kill_fails(batch: CommandBatch) -> Any:
        connection_id = await batch.one("CLIENT", "ID")
        _clean.client_kill_filter(_id=connection_id)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(await batch.one("PING"))
            except ConnectionError:
                outcomes.append("failed")
        return connection_id, outcomes, await batch.one("CLIENT", "ID")

    old, outcomes, new = _run(first_ping_after_the_kill_fails)
    assert outcomes[-1] == b"PONG"  # reconnected by the next command
    assert outcomes.count("failed") <= 1  # only what met the dead connection
    assert new != old
