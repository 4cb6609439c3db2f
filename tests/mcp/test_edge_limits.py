"""Input hygiene and fair shares on a live server: nesting, string and batch limits answer
400 before any work, NUL travels untouched and is stored escaped (audit row and background
run alike), text no UTF-8 can carry leaves as valid UTF-8, and one session cannot hold more
than its share of a process.

The server runs with small limits (MCP_MAX_JSON_DEPTH=8, MCP_MAX_STRING_CHARS=1000,
MCP_MAX_BATCH_REQUESTS=5, MCP_SESSION_MAX_IN_FLIGHT=2) so the tests stay cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from audit.models import Invocation
from mcp_platform.redis_clients import sync_redis
from tenants.models import Tenant
from tenants.services import api_key_create, tenant_create
from tests.mcp.live import LiveServer, journal_drained, start_server, stop_together
from tests.mcp.wire import INIT_PARAMS, McpSession, headers, note, parse_sse, rpc
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern
from tools_app.runs import limits
from tools_app.runs.models import ToolRun

pytestmark = pytest.mark.live

MODERN = "2026-07-28"
LIMITS = {
    "MCP_MAX_JSON_DEPTH": "8",
    "MCP_MAX_STRING_CHARS": "1000",
    "MCP_MAX_BATCH_REQUESTS": "5",
    "MCP_SESSION_MAX_IN_FLIGHT": "2",
}


SLUG = "live-edge"


@pytest.fixture(scope="module")
def edge_key(live_world: Any, django_db_blocker: Any) -> Iterator[str]:
    """A tenant of its own (so the extra tool shows in no other test's lists): the demo
    tools, the background ones, and a tool whose output UTF-8 cannot carry as it is."""
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=SLUG, name="Edge")
        tenant.max_concurrent_calls = 50  # far from binding; counting lets tests see calls running
        tenant.save()
        tool = Tool(
            name="unencodable",
            description="Returns a lone surrogate and a NUL.",
            input_schema={"type": "object"},
            backend_config={"handler": "testing.unencodable"},
            tags=["edge-unencodable"],
            read_only_hint=True,  # harmless: runs without asking for confirmation
        )
        tool.full_clean()
        tool.save()
        for pattern in ("tag:demo", "tag:bg", "tag:edge-unencodable"):
            access_rule_grant_pattern(tenant=tenant, pattern=pattern)
        _, raw = api_key_create(tenant=tenant, name="edge")
    yield raw
    with django_db_blocker.unblock():
        wait_for(journal_drained, timeout=30, message="the audit writer to write every journaled row")
        Tenant.objects.filter(slug=SLUG).delete()
        Tool.objects.filter(pk=tool.pk).delete()


@pytest.fixture(scope="module")
def limited(live_world: Any, live_audit_writer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_server(tmp_path_factory.mktemp("limited"), "limited", LIMITS)
    yield server
    stop_together([server.process], grace=10)


def _modern(key: str, method: str, name: str | None = None) -> dict[str, str]:
    extra = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name:
        extra["Mcp-Name"] = name
    return headers(key, **extra)


def _modern_call(name: str, arguments: Any, id: Any = 1) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    return rpc("tools/call", {"name": name, "arguments": arguments, "_meta": meta}, id=id)


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _message(response: httpx.Response, request_id: Any) -> dict[str, Any]:
    if response.headers["content-type"].startswith("application/json"):
        return response.json()  # type: ignore[no-any-return]
    for event in parse_sse(response.text.split("\n")):
        if event.message and event.message.get("id") == request_id:
            return event.message
    raise AssertionError(response.text)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [({"text": _nested(8)}, "nested deeper than 8 levels"), ({"text": "x" * 1001}, "longer than 1000 characters")],
)
def test_nesting_and_string_limits_answer_400_on_both_legs(http, limited, edge_key, arguments, problem):
    key = edge_key
    session = McpSession.open(http, limited.endpoint(SLUG), key)
    legacy = session.post(rpc("tools/call", {"name": "echo", "arguments": arguments}))
    modern = http.post(
        limited.endpoint(SLUG), json=_modern_call("echo", arguments), headers=_modern(key, "tools/call", "echo")
    )
    for response in (legacy, modern):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == -32600 and problem in error["message"]
    # Just inside the limits, the same call works.
    assert "result" in session.request("tools/call", {"name": "echo", "arguments": {"text": "x" * 1000}})


def test_a_batch_past_the_limit_is_refused_whole(http, limited, edge_key):
    session = McpSession.open(http, limited.endpoint(SLUG), edge_key, version="2025-03-26")
    calls = [rpc("tools/call", {"name": "echo", "arguments": {"text": str(n)}}, id=n) for n in range(6)]
    refused = session.post(calls)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": -32600,
        "message": "Invalid Request: a batch may hold at most 5 messages, got 6",
    }
    answered = session.post(calls[:5])
    assert answered.status_code == 200
    answers = {message["id"]: message for message in json.loads(answered.text)}
    assert [answers[n]["result"]["content"][0]["text"] for n in range(5)] == ["0", "1", "2", "3", "4"]


def test_nul_travels_untouched_and_is_stored_escaped(http, limited, edge_key, orm, live_workers):
    """One rule for every copy the database keeps (mcp_platform/mcp/text.py): the audit row of
    an inline call, and a background run's arguments, result and audit row."""
    key = edge_key
    session = McpSession.open(http, limited.endpoint(SLUG), key)
    inline = session.request("tools/call", {"name": "echo", "arguments": {"text": "in\x00line"}})
    assert inline["result"]["content"][0]["text"] == "in\x00line"  # the client gets exactly what it sent
    row = wait_for(
        lambda: Invocation.objects.filter(session_id=session.session_id, tool_name="echo").first(),
        message="the inline call's invocation row",
    )
    assert row.arguments == {"text": "in\\u0000line"} and row.outcome == "completed"

    background = session.request("tools/call", {"name": "bg_echo", "arguments": {"text": "back\x00ground"}})
    assert "result" in background and not background["result"].get("isError"), background
    run = wait_for(
        lambda: ToolRun.objects.filter(
            session_id=session.session_id, tool_name="bg_echo", status=ToolRun.Status.COMPLETED
        ).first(),
        message="the completed run's row (written behind)",
    )
    assert run.arguments == {"text": "back\\u0000ground"}
    bg_row = wait_for(
        lambda: Invocation.objects.filter(session_id=session.session_id, tool_name="bg_echo").first(),
        message="the background call's invocation row",
    )
    assert bg_row.outcome == "completed"


def test_text_utf8_cannot_carry_leaves_as_valid_utf8(http, limited, edge_key):
    key = edge_key
    session = McpSession.open(http, limited.endpoint(SLUG), key)
    legacy = session.post(rpc("tools/call", {"name": "unencodable", "arguments": {}}, id=3))
    modern = http.post(
        limited.endpoint(SLUG),
        json=_modern_call("unencodable", {}, id=4),
        headers=_modern(key, "tools/call", "unencodable"),
    )
    for response, request_id in ((legacy, 3), (modern, 4)):
        assert response.status_code == 200
        response.content.decode("utf-8")  # strict
        text = _message(response, request_id)["result"]["content"][0]["text"]
        assert text == "lone \ufffd and nul \x00 end"


def _running_calls() -> int:
    """The edge tenant's calls running now, as every server process counts them."""
    tenant_id = Tenant.objects.values_list("pk", flat=True).get(slug=SLUG)
    return int(sync_redis().get(f"{limits.PREFIX}:running:{tenant_id}") or 0)


def test_one_session_cannot_hold_more_than_its_share(http, limited, edge_key, orm):
    session = McpSession.open(http, limited.endpoint(SLUG), edge_key)
    other = McpSession.open(http, limited.endpoint(SLUG), edge_key)
    # Two long calls (countdown: 100 steps of 0.2 s) hold the session's two slots; each
    # holds one of the tenant's call slots too, which is how the test sees it running.
    long_calls = []
    for n in range(2):
        call = rpc("tools/call", {"name": "countdown", "arguments": {"n": 100}}, id=f"long-{n}")
        long_calls.append(session.post_in_thread(call))
        wait_for(lambda n=n: _running_calls() == n + 1, message=f"long call {n} to run")

    def third_refused() -> httpx.Response | None:
        response = session.post(rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id="third"))
        return response if response.status_code == 429 else None

    refused = wait_for(third_refused, message="a third request of the session to be refused")
    assert refused.headers["retry-after"] == "1"
    assert "already has 2 requests running" in refused.json()["error"]["message"]
    # Another session of the same client is not held up.
    assert "result" in other.request("tools/call", {"name": "echo", "arguments": {"text": "fine"}})
    for n in range(2):
        cancel = note("notifications/cancelled", {"requestId": f"long-{n}"})
        assert session.post(cancel).status_code == 202
    for pending in long_calls:
        pending.response()
    assert "result" in session.request("tools/call", {"name": "echo", "arguments": {"text": "again"}})


def test_initialize_and_every_limit_error_are_json(http, limited, edge_key):
    """A request refused at the edge still gets a JSON-RPC body, not text."""
    init = http.post(
        limited.endpoint(SLUG),
        content=json.dumps(rpc("initialize", INIT_PARAMS | {"x": _nested(20)})).encode(),
        headers=headers(edge_key),
    )
    assert init.status_code == 400
    assert init.json()["error"]["code"] == -32600
