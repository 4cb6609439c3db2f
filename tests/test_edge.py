"""The ASGI edge guard on its own (tests/mcp/test_edge_slow_clients.py drives it on a live
server): a late body is a 408 and the application sees the client leave, an early answer
closes the connection, and one address gets its share of requests."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from mcp_platform.edge import EdgeGuard

BODY_SCOPE = {"type": "http", "path": "/api/v1/x", "client": ("10.0.0.1", 5), "headers": [(b"content-length", b"9")]}


def _recorder() -> tuple[list[dict[str, Any]], Any]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return sent, send


async def test_a_late_body_is_a_408_and_the_application_sees_a_disconnect():
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())

    async def trickle() -> dict[str, Any]:
        await asyncio.Event().wait()  # a body that never comes
        raise AssertionError("unreachable")

    sent, send = _recorder()
    await asyncio.wait_for(EdgeGuard(app, body_timeout_seconds=0.1, max_per_client=0)(BODY_SCOPE, trickle, send), 5)
    assert seen == [{"type": "http.disconnect"}]
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert orjson.loads(sent[1]["body"]) == {"detail": "Request timeout: the body did not arrive within 0.1 s"}


async def test_an_answer_before_the_body_closes_the_connection_and_a_read_body_keeps_it():
    async def early(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def reads(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await early(scope, receive, send)

    async def body() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    guard = EdgeGuard(early, body_timeout_seconds=5, max_per_client=0)
    sent, send = _recorder()
    await guard(BODY_SCOPE, body, send)
    assert (b"connection", b"close") in sent[0]["headers"]
    sent, send = _recorder()
    await EdgeGuard(reads, body_timeout_seconds=5, max_per_client=0)(BODY_SCOPE, body, send)
    assert sent[0]["headers"] == []


async def test_one_address_gets_its_share_and_others_are_served():
    release = asyncio.Event()

    async def hold(scope: Any, receive: Any, send: Any) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = EdgeGuard(hold, body_timeout_seconds=5, max_per_client=2)
    scope = dict(BODY_SCOPE, path="/mcp/acme", headers=[])
    held = [asyncio.create_task(guard(scope, None, _recorder()[1])) for _ in range(2)]
    await asyncio.sleep(0)  # let both start (the behaviour under test is their being open)
    sent, send = _recorder()
    await guard(scope, None, send)
    assert sent[0]["status"] == 429 and (b"retry-after", b"1") in sent[0]["headers"]
    assert orjson.loads(sent[1]["body"])["error"]["code"] == -32000
    other, other_send = _recorder()
    other_task = asyncio.create_task(guard(dict(scope, client=("10.0.0.2", 1)), None, other_send))
    release.set()
    await asyncio.gather(*held, other_task)
    assert other[0]["status"] == 200
    sent, send = _recorder()
    await guard(scope, None, send)
    assert sent[0]["status"] == 200
