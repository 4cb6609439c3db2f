"""A call's limits are checked in the round trip that checks its credential when the
process's Redis connection is idle (in-process, on the real ASGI application, real Redis):
a sequential caller's call waits for Redis twice, and whatever that head start took for a
request that was no call, or no allowed one, is given back: the minute's count and the
concurrency slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from mcp_platform.asgi import application
from mcp_platform.redis_batch import CommandBatch
from mcp_platform.redis_clients import command_batch, sync_redis
from tenants import auth
from tenants.models import Tenant
from tenants.services import api_key_revoke, tenant_update
from tests.mcp.wire import INIT_PARAMS, headers, note, parse_sse, rpc
from tests.poll import wait_for_async
from tools_app.runs import limits

pytestmark = pytest.mark.django_db(transaction=True)

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
ECHO = {"name": "echo", "arguments": {"text": "echoed"}}


@pytest.fixture(autouse=True)
async def _close_application_connections(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """As in test_edge_faults: the application's queries run on asgiref's thread, whose
    connection is closed after the test; the key's last-used stamp is left out."""
    monkeypatch.setattr(auth, "_touch_key", lambda key_id: None)
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def limited(acme, make_key, make_tool, grant) -> tuple[Tenant, Any, str]:
    make_tool("echo")
    grant(acme, "*")
    tenant_update(tenant=acme, changes={"calls_per_minute": 1000, "max_concurrent_calls": 2})
    key, raw = make_key(acme)
    return acme, key, raw


class Writes:
    """The hot path's Redis writes, each as the commands it carried (``CommandBatch``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[list[str]] = []
        self.counting = False
        self._queued: list[str] = []
        run, flush = CommandBatch.run, CommandBatch._flush

        def counted_run(batch: CommandBatch, commands: Any) -> Any:
            if self.counting:
                self._queued.extend(str(command[0]) for command in commands)
            return run(batch, commands)

        def counted_flush(batch: CommandBatch) -> None:
            sending = bool(batch._queued) and batch._transport is not None and not batch._transport.is_closing()
            flush(batch)
            if sending and self.counting and self._queued:
                self.writes.append(sorted(self._queued))
                self._queued = []

        monkeypatch.setattr(CommandBatch, "run", counted_run)
        monkeypatch.setattr(CommandBatch, "_flush", counted_flush)


def _as_uvicorn_delivers(app: Any) -> Any:
    """The application behind uvicorn's way with a small body: it arrives with the headers and
    is handed over in one message (httpx's ASGI transport sends it in parts, then an empty
    last one)."""

    async def coalesced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        parts: list[bytes] = []
        while scope["type"] == "http":
            message = await receive()
            if message["type"] != "http.request":
                break
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                message = {"type": "http.request", "body": b"".join(parts), "more_body": False}
                break
        else:
            await app(scope, receive, send)
            return
        pending = [message]

        async def again() -> dict[str, Any]:
            return pending.pop() if pending else await receive()

        await app(scope, again, send)

    return coalesced


def _client() -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=_as_uvicorn_delivers(application), client=("127.0.0.1", 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


async def _session(http: httpx.AsyncClient, raw: str) -> dict[str, str]:
    init = await http.post("/mcp/acme", json=rpc("initialize", INIT_PARAMS, id=0), headers=headers(raw))
    session = headers(raw, init.headers["mcp-session-id"], **{"MCP-Protocol-Version": "2025-11-25"})
    await http.post("/mcp/acme", json=note("notifications/initialized"), headers=session)
    return session


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer, sent as JSON or as the last event of a stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        message = parse_sse(response.text.splitlines())[-1].message
        assert message is not None
        return message
    answer: dict[str, Any] = response.json()
    return answer


def _echoed(response: httpx.Response) -> bool:
    result = _answer(response).get("result", {})
    return bool(result.get("content") == [{"type": "text", "text": "echoed"}] and not result.get("isError"))


def _counts(tenant: Tenant) -> tuple[int, int]:
    """The tenant's calls counted this minute and its concurrency slots taken."""
    redis = sync_redis()
    rate = redis.get(f"{limits.PREFIX}:rate:{tenant.pk}:{int(time.time() // 60)}")
    return int(rate or 0), int(redis.get(limits.running_key(tenant.pk)) or 0)


async def _settled(tenant: Tenant, expected: tuple[int, int]) -> None:
    """The give-back is sent without waiting: poll for its effect."""

    async def there() -> bool:
        return await sync_to_async(_counts)(tenant) == expected

    await wait_for_async(there, timeout=5, message=f"the counters to read {expected}")


@pytest.fixture(autouse=True)
async def _early_in_a_minute() -> None:
    """Counts are per clock minute: every test's requests fall into one."""

    async def early() -> bool:
        return time.time() % 60 < 50

    await wait_for_async(early, timeout=15, message="the clock to be early in a minute")


async def test_a_sequential_call_waits_for_redis_twice_on_both_revisions(limited, monkeypatch):
    tenant, _, raw = limited
    writes = Writes(monkeypatch)
    async with _client() as http:
        session = await _session(http, raw)
        modern = headers(raw, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
        legacy_call = rpc("tools/call", ECHO, id=1)
        modern_call = rpc("tools/call", {**ECHO, "_meta": META}, id=2)
        for _ in range(2):  # warm: the tenant's record, the catalog, the scripts loaded
            assert _echoed(await http.post("/mcp/acme", json=legacy_call, headers=session))
            assert _echoed(await http.post("/mcp/acme", json=modern_call, headers=modern))
        for body, head, first in (
            (legacy_call, session, ["EVALSHA", "GETEX", "HMGET"]),
            (modern_call, modern, ["EVALSHA", "HMGET"]),
        ):
            writes.writes.clear()
            writes.counting = True
            answer = await http.post("/mcp/acme", json=body, headers=head)
            writes.counting = False
            assert _echoed(answer)
            # The session, the credential's freshness and the limits in one write; the slot
            # given back and the audit row in the other.
            assert writes.writes[0] == first, writes.writes
            assert writes.writes[1][:2] == ["DECR", "XADD"]
            assert len(writes.writes) == 2, writes.writes
        # With other commands on their way (another request's, here a PING), the check is
        # not sent ahead: it will ride with whatever is queued when its turn comes.
        writes.writes.clear()
        writes.counting = True
        pinged = command_batch().run([("PING",)])
        answer = await http.post("/mcp/acme", json=legacy_call, headers=session)
        writes.counting = False
        assert await pinged == [b"PONG"] and _echoed(answer)
        assert ["EVALSHA"] in writes.writes and "EVALSHA" not in writes.writes[0], writes.writes
    await _settled(tenant, (4 + 2 + 1, 0))


async def test_a_request_that_was_no_allowed_call_is_neither_counted_nor_holds_a_slot(limited):
    tenant, _, raw = limited
    async with _client() as http:
        session = await _session(http, raw)
        assert _echoed(await http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=session))
        await _settled(tenant, (1, 0))
        unknown = rpc("tools/call", {"name": "no-such-tool", "arguments": {}})
        assert "error" in _answer(await http.post("/mcp/acme", json=unknown, headers=session))
        # Looks like a call, is not one: a resource read whose text names the method.
        read = rpc("resources/read", {"uri": "ui://tools/call"})
        assert (await http.post("/mcp/acme", json=read, headers=session)).status_code == 200
        lost = headers(raw, "no-such-session")
        assert (await http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=lost)).status_code == 404
    await _settled(tenant, (1, 0))


async def test_a_stranger_takes_no_slot_even_for_a_moment(limited, monkeypatch):
    """A wrong key or none never starts the check: one by one (when the head start would be
    given), not a command of the limits goes out; hundreds at once leave the caller's two
    slots and the minute's count untouched."""
    tenant, _, raw = limited
    writes = Writes(monkeypatch)
    async with _client() as http:
        session = await _session(http, raw)
        assert _echoed(await http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=session))
        writes.counting = True
        for stranger in (headers(raw[:-4] + "xxxx"), headers(), headers("not-a-key")):
            for _ in range(5):
                answer = await http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=stranger)
                assert answer.status_code == 401
        writes.counting = False
        sent = {command for write in writes.writes for command in write}
        assert not sent & {"EVAL", "EVALSHA", "DECR"}, writes.writes
        stranger = headers(raw[:-4] + "xxxx")
        answers = await asyncio.gather(
            *(http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=stranger) for _ in range(200)),
            *(http.post("/mcp/acme", json=rpc("tools/call", ECHO, id=n), headers=session) for n in range(2)),
        )
    assert [a.status_code for a in answers[:200]] == [401] * 200
    assert all(_echoed(a) for a in answers[200:]), [a.text for a in answers[200:]]
    await _settled(tenant, (3, 0))


def _revoke(tenant: Tenant, key: Any) -> None:
    api_key_revoke(key=key)


def _deactivate(tenant: Tenant, key: Any) -> None:
    tenant_update(tenant=tenant, changes={"is_active": False})


@pytest.mark.parametrize(("change", "status"), [(_revoke, 401), (_deactivate, 404)])
async def test_a_caller_refused_after_it_was_cached_is_not_counted(limited, change, status):
    """The process still holds the key (or the tenant) as valid: each of 20 requests at once
    gets a head start, the credential check refuses it, and it is given back."""
    tenant, key, raw = limited
    async with _client() as http:
        session = await _session(http, raw)
        assert _echoed(await http.post("/mcp/acme", json=rpc("tools/call", ECHO), headers=session))
        await sync_to_async(change)(tenant, key)
        refused = await asyncio.gather(
            *(http.post("/mcp/acme", json=rpc("tools/call", ECHO, id=n), headers=session) for n in range(20))
        )
    assert [a.status_code for a in refused] == [status] * 20
    await _settled(tenant, (1, 0))


async def test_limits_changed_while_the_tenant_was_cached_apply_to_the_next_call(limited):
    """The head start used the old limits; the call is judged by the new ones, its stale check
    given back first: it must not count against the call itself (one slot of one is free),
    and a call is counted once."""
    tenant, _, raw = limited
    async with _client() as http:
        session = await _session(http, raw)

        async def call(n: int) -> httpx.Response:
            return await http.post("/mcp/acme", json=rpc("tools/call", ECHO, id=n), headers=session)

        assert _echoed(await call(1))
        await sync_to_async(tenant_update)(tenant=tenant, changes={"max_concurrent_calls": 1})
        assert _echoed(await call(2))
        await sync_to_async(tenant_update)(tenant=tenant, changes={"calls_per_minute": 2})
        refused = _answer(await call(3))
    assert "2 calls per minute" in refused["error"]["message"]
    await _settled(tenant, (3, 0))  # the refused call counts, once


async def test_concurrent_calls_of_one_key_share_the_slots_and_free_them_all(limited, make_tool):
    """Twelve calls of a slow tool at once against two slots: at most two run, the rest are
    refused, and every slot is free afterwards."""
    tenant, _, raw = limited
    await sync_to_async(make_tool)(
        "countdown",
        handler="demo.countdown",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    modern = headers(raw, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "countdown"})
    call = {"name": "countdown", "arguments": {"n": 2}, "_meta": META}
    async with _client() as http:
        answers = await asyncio.gather(
            *(http.post("/mcp/acme", json=rpc("tools/call", call, id=n), headers=modern) for n in range(12))
        )
    texts = [a.text for a in answers]
    assert sum("Too many calls at once" in t for t in texts) >= 10, texts
    assert sum("Countdown from 2 finished" in t for t in texts) >= 1, texts
    await _settled(tenant, (12, 0))
