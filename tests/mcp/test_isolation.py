"""Tenants and credentials never cross: keys, sessions, tools."""

from __future__ import annotations

import pytest

from tests.mcp.wire import McpSession, headers, rpc

pytestmark = pytest.mark.live


def test_key_of_another_tenant_is_refused(http, server, live_world):
    response = http.post(server.endpoint("live-beta"), json=rpc("ping"), headers=headers(live_world.keys["alpha"]))
    assert response.status_code == 401


def test_session_is_bound_to_its_credential(http, server, live_world):
    alpha = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    # Same tenant, another key: the session id alone is no credential.
    other_key = http.post(
        alpha.endpoint, json=rpc("ping"), headers=headers(live_world.keys["alpha2"], alpha.session_id)
    )
    assert other_key.status_code == 404
    # Another tenant's endpoint and key with alpha's session id: just as unknown.
    beta = http.post(
        server.endpoint("live-beta"), json=rpc("ping"), headers=headers(live_world.keys["beta"], alpha.session_id)
    )
    assert beta.status_code == 404
    # Anonymous callers cannot pick it up either.
    anon = http.post(server.endpoint("live-public"), json=rpc("ping"), headers=headers(None, alpha.session_id))
    assert anon.status_code == 404
    # The rightful owner still can.
    assert alpha.post(rpc("ping")).status_code == 200


def test_forbidden_and_missing_tools_answer_the_same(http, server, live_world):
    beta = McpSession.open(http, server.endpoint("live-beta"), live_world.keys["beta"])
    listed = {tool["name"] for tool in _all_tools(beta)}
    assert "test_elicitation" not in listed and "echo" in listed
    forbidden = beta.request("tools/call", {"name": "test_elicitation", "arguments": {"message": "x"}})
    missing = beta.request("tools/call", {"name": "does_not_exist_anywhere", "arguments": {}})
    assert forbidden["error"]["code"] == missing["error"]["code"] == -32602
    assert forbidden["error"]["message"] == "Unknown tool: test_elicitation"


def test_resume_of_another_sessions_stream_is_refused(http, server, live_world):
    alpha = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    response = alpha.post(
        rpc("tools/call", {"name": "countdown", "arguments": {"n": 1}, "_meta": {"progressToken": 1}}, id=9)
    )
    event_id = response.text.split("\n")[0].removeprefix("id: ")
    other = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    replay = http.get(other.endpoint, headers=other.headers(Accept="text/event-stream", **{"Last-Event-ID": event_id}))
    assert replay.status_code == 400


def _all_tools(session: McpSession) -> list[dict]:
    tools, cursor = [], None
    while True:
        page = session.request("tools/list", {"cursor": cursor} if cursor else {})["result"]
        tools += page["tools"]
        cursor = page.get("nextCursor")
        if not cursor:
            return tools
