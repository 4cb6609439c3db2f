"""A fault after a request was read is answered with that request's id, in-process on the
real ASGI application: Redis failing under a method is a 503 with Retry-After, a bug a
-32603, on both protocol legs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import sync_to_async
from django.db import connections

from mcp_platform.asgi import application
from mcp_platform.mcp.engine import Engine
from mcp_platform.mcp.stateless import StatelessEngine
from tenants import auth
from tests.mcp.wire import INIT_PARAMS, headers, note, parse_sse, rpc

pytestmark = pytest.mark.django_db(transaction=True)

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.fixture
def key(acme, make_key, grant) -> str:
    grant(acme, "*")
    return make_key(acme)[1]


@pytest.fixture(autouse=True)
async def _close_application_connections(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """The application's queries run on asgiref's thread: its connection is closed there
    after the test, or the test database could not be dropped at the end of the run. (The
    key's last-used stamp, written from a thread of its own, is left out here.)"""
    monkeypatch.setattr(auth, "_touch_key", lambda key_id: None)
    yield
    await sync_to_async(connections.close_all)()


async def _legacy(http: httpx.AsyncClient, key: str, request_id: Any) -> httpx.Response:
    init = await http.post("/mcp/acme", json=rpc("initialize", INIT_PARAMS, id=0), headers=headers(key))
    session = headers(key, init.headers["mcp-session-id"], **{"MCP-Protocol-Version": "2025-11-25"})
    await http.post("/mcp/acme", json=note("notifications/initialized"), headers=session)
    return await http.post("/mcp/acme", json=rpc("tools/list", {}, id=request_id), headers=session)


async def _modern(http: httpx.AsyncClient, key: str, request_id: Any) -> httpx.Response:
    head = headers(key, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    return await http.post("/mcp/acme", json=rpc("tools/list", {"_meta": META}, id=request_id), headers=head)


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [(redis.ConnectionError("Redis went away"), 503, -32000), (RuntimeError("a bug"), 500, -32603)],
)
async def test_a_fault_under_a_method_is_answered_with_the_request_id(key, monkeypatch, fault, status, code):
    async def fail(*args: Any, **kwargs: Any) -> Any:
        raise fault

    # Past the engines' own handling: what reaches the transport (a stream that cannot be
    # written, a store that cannot be read) is answered there.
    monkeypatch.setattr(Engine, "handle", fail)
    monkeypatch.setattr(StatelessEngine, "handle", fail)
    transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        answers = [await _legacy(http, key, "legacy-7"), await _modern(http, key, "modern-8")]
    for response, request_id in zip(answers, ["legacy-7", "modern-8"], strict=True):
        assert response.status_code == status, response.text
        body = response.json()
        assert body["id"] == request_id and body["error"]["code"] == code
        if status == 503:
            assert response.headers["retry-after"] == "2"


async def test_a_fault_in_a_stream_under_way_ends_it_with_the_error(key, monkeypatch):
    async def progress_then_fail(self: Any, identity: Any, message: Any, session: Any, stream: Any) -> Any:
        await stream.send(note("notifications/progress", {"progressToken": 1, "progress": 1}))
        raise redis.ConnectionError("Redis went away mid-stream")

    monkeypatch.setattr(Engine, "handle", progress_then_fail)
    transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        response = await _legacy(http, key, "streamed-9")
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = [event.message for event in parse_sse(response.text.split("\n")) if event.message]
    assert messages[0]["method"] == "notifications/progress"
    assert messages[-1] == {
        "jsonrpc": "2.0",
        "id": "streamed-9",
        "error": {"code": -32000, "message": "Service unavailable: retry later"},
    }
