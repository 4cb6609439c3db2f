"""Every HTTP status and JSON-RPC error code of the Streamable HTTP matrix, on a live server."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.mcp.wire import ACCEPT_BOTH, INIT_PARAMS, McpSession, headers, note, parse_sse, rpc
from tests.poll import wait_for

pytestmark = pytest.mark.live


@pytest.fixture
def alpha(http, server, live_world) -> McpSession:
    return McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])


def _error(response: httpx.Response) -> dict:
    return response.json()["error"]


def test_initialize_negotiates_and_issues_a_visible_ascii_session_id(http, server, live_world):
    for requested, expected in (
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2099-01-01", "2025-11-25"),
        (None, "2025-11-25"),
    ):
        params = dict(INIT_PARAMS, protocolVersion=requested)
        response = http.post(
            server.endpoint("live-alpha"),
            json=rpc("initialize", params, id=0),
            headers=headers(live_world.keys["alpha"]),
        )
        assert response.status_code == 200
        body = response.json()
        assert body["id"] == 0  # id 0 is a request like any other
        assert body["result"]["protocolVersion"] == expected
        assert body["result"]["capabilities"]["tools"] == {"listChanged": True}
        session_id = response.headers["mcp-session-id"]
        assert len(session_id) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in session_id)


def test_host_and_origin_are_checked(http, server, live_world):
    endpoint = server.endpoint("live-alpha")
    body = rpc("initialize", INIT_PARAMS, id=0)
    key = live_world.keys["alpha"]
    evil_host = http.post(endpoint, json=body, headers=headers(key, Host="evil.example.com"))
    assert evil_host.status_code == 403
    evil_origin = http.post(endpoint, json=body, headers=headers(key, Origin="http://evil.example.com"))
    assert evil_origin.status_code == 403
    local_origin = http.post(endpoint, json=body, headers=headers(key, Origin="http://localhost:5173"))
    assert local_origin.status_code == 200


def test_credentials(http, server, live_world):
    endpoint = server.endpoint("live-alpha")
    body = rpc("initialize", INIT_PARAMS, id=0)
    for key in (None, "tbk_nope", live_world.keys["beta"], live_world.keys["revoked"], live_world.keys["expired"]):
        response = http.post(endpoint, json=body, headers=headers(key))
        assert response.status_code == 401, key
        assert response.headers["www-authenticate"] == "Bearer"
        assert "resource_metadata" not in response.headers["www-authenticate"]
    malformed = http.post(endpoint, json=body, headers={**headers(), "Authorization": "Basic abc"})
    assert malformed.status_code == 401


def test_unknown_and_inactive_tenants_are_404(http, server, live_world):
    body = rpc("initialize", INIT_PARAMS, id=0)
    for slug in ("no-such-tenant", "live-inactive"):
        response = http.post(server.endpoint(slug), json=body, headers=headers(live_world.keys["alpha"]))
        assert response.status_code == 404


def test_anonymous_tenant_serves_without_a_key(http, server):
    response = http.post(server.endpoint("live-public"), json=rpc("initialize", INIT_PARAMS, id=0), headers=headers())
    assert response.status_code == 200


def test_method_accept_content_type_size_and_json(http, server, live_world, alpha):
    endpoint = server.endpoint("live-alpha")
    put = http.put(endpoint, json={}, headers=alpha.headers())
    assert put.status_code == 405 and put.headers["allow"] == "GET, POST, DELETE"

    only_json = http.post(endpoint, json=rpc("ping"), headers=alpha.headers(Accept="application/json"))
    assert only_json.status_code == 406
    either_order = http.post(
        endpoint, json=rpc("ping"), headers=alpha.headers(Accept="text/event-stream, application/json")
    )
    assert either_order.status_code == 200

    text = http.post(
        endpoint,
        content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers=alpha.headers(**{"Content-Type": "text/plain"}),
    )
    assert text.status_code == 415
    charset = http.post(
        endpoint,
        content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        headers=alpha.headers(**{"Content-Type": "application/json; charset=utf-8"}),
    )
    assert charset.status_code == 200

    huge = http.post(endpoint, content=b'{"x":"' + b"a" * 70000 + b'"}', headers=alpha.headers())
    assert huge.status_code == 413

    broken = http.post(endpoint, content=b"{not json", headers=alpha.headers())
    assert broken.status_code == 400 and _error(broken)["code"] == -32700
    assert broken.json()["id"] is None


@pytest.mark.parametrize(
    "body",
    [
        {"id": 1, "method": "ping"},  # no jsonrpc
        {"jsonrpc": "2.0", "id": None, "method": "ping"},  # null id
        {"jsonrpc": "2.0", "id": True, "method": "ping"},  # bool id
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},  # float id
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]},
        "just a string",
    ],
)
def test_invalid_requests_are_32600(http, alpha, body):
    response = alpha.post(body)
    assert response.status_code == 400
    assert _error(response)["code"] == -32600


def test_session_header_rules(http, server, live_world, alpha):
    endpoint = server.endpoint("live-alpha")
    key = live_world.keys["alpha"]
    missing = http.post(endpoint, json=rpc("ping"), headers=headers(key))
    assert missing.status_code == 400
    unknown = http.post(endpoint, json=rpc("ping"), headers=headers(key, "not-a-session"))
    assert unknown.status_code == 404 and _error(unknown)["code"] == -32001

    bad_version = alpha.post(rpc("ping"), **{"MCP-Protocol-Version": "1999-01-01"})
    assert bad_version.status_code == 400
    # Any supported version is accepted inside a session, even one that differs.
    assert alpha.post(rpc("ping"), **{"MCP-Protocol-Version": "2025-03-26"}).status_code == 200
    no_header = http.post(endpoint, json=rpc("ping"), headers=headers(key, alpha.session_id))
    assert no_header.status_code == 200

    reinit = alpha.post(rpc("initialize", INIT_PARAMS, id=99))
    assert reinit.status_code == 400


def test_ping_set_level_and_unknown_method(alpha):
    assert alpha.request("ping") == {"jsonrpc": "2.0", "id": alpha.next_id, "result": {}}
    assert alpha.request("logging/setLevel", {"level": "debug"})["result"] == {}
    bad_level = alpha.request("logging/setLevel", {"level": "loud"})
    assert bad_level["error"]["code"] == -32602
    unknown = alpha.request("unknown/method")
    assert unknown["error"]["code"] == -32601


def test_notifications_and_responses_get_202(alpha):
    assert alpha.post(note("notifications/roots/list_changed")).status_code == 202
    assert alpha.post({"jsonrpc": "2.0", "id": "s-unknown", "result": {}}).status_code == 202
    assert alpha.post(note("notifications/cancelled", {"requestId": 12345})).status_code == 202


def test_delete_ends_the_session(http, alpha):
    assert http.delete(alpha.endpoint, headers=alpha.headers()).status_code == 200
    after = alpha.post(rpc("ping"))
    assert after.status_code == 404
    assert http.delete(alpha.endpoint, headers=alpha.headers()).status_code == 404


def test_tools_list_pages_with_signed_cursors(alpha):
    names, cursor, pages = [], None, 0
    while True:
        page = alpha.request("tools/list", {"cursor": cursor} if cursor else {})["result"]
        pages += 1
        assert len(page["tools"]) <= 3
        names += [tool["name"] for tool in page["tools"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert pages > 2 and names == sorted(names) and len(names) == len(set(names))
    for tool in alpha.request("tools/list")["result"]["tools"]:
        assert None not in tool.values()
        assert tool["inputSchema"]["type"] == "object"
    tampered = alpha.request("tools/list", {"cursor": "eyJvIjogM30.AAAAAAAAAAAAAAAAAAAAAA"})
    assert tampered["error"]["code"] == -32602
    garbage = alpha.request("tools/list", {"cursor": 42})
    assert garbage["error"]["code"] == -32602


def test_tools_call_errors(alpha):
    unknown = alpha.request("tools/call", {"name": "no_such_tool", "arguments": {}})
    assert unknown["error"] == {"code": -32602, "message": "Unknown tool: no_such_tool"}
    no_name = alpha.request("tools/call", {"arguments": {}})
    assert no_name["error"]["code"] == -32602
    bad_args = alpha.request("tools/call", {"name": "echo", "arguments": [1]})
    assert bad_args["error"]["code"] == -32602
    omitted = alpha.request("tools/call", {"name": "test_simple_text"})  # arguments may be absent
    assert omitted["result"]["content"][0]["text"] == "This is a simple text response for testing."
    failing = alpha.request("tools/call", {"name": "test_error_handling", "arguments": {}})
    assert failing["result"]["isError"] is True


def _modern_probe(version: str) -> dict:
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    return rpc("server/discover", {"_meta": meta})


def test_modern_probe_is_discovered(http, server, live_world):
    response = http.post(
        server.endpoint("live-alpha"),
        json=_modern_probe("2026-07-28"),
        headers=headers(
            live_world.keys["alpha"], **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
        ),
    )
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["resultType"] == "complete"


def test_unknown_stateless_revision_is_answered_as_unsupported_version(http, server, live_world):
    response = http.post(
        server.endpoint("live-alpha"),
        json=_modern_probe("2099-01-01"),
        headers=headers(
            live_world.keys["alpha"], **{"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "server/discover"}
        ),
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == -32022
    assert error["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


def test_batches_only_for_2025_03_26(http, server, live_world, alpha):
    old = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"], version="2025-03-26")
    assert old.version == "2025-03-26"
    batch = [
        rpc("ping", id=1),
        rpc("tools/call", {"name": "echo", "arguments": {"text": "b"}}, id=2),
        note("notifications/roots/list_changed"),
        rpc("initialize", INIT_PARAMS, id=3),
    ]
    response = old.post(batch)
    assert response.status_code == 200
    answers = {item["id"]: item for item in response.json()}
    assert answers[1]["result"] == {}
    assert answers[2]["result"]["content"][0]["text"] == "b"
    assert answers[3]["error"]["code"] == -32600
    assert old.post([note("notifications/roots/list_changed")]).status_code == 202
    assert old.post([]).status_code == 400

    rejected = alpha.post([rpc("ping")])
    assert rejected.status_code == 400 and _error(rejected)["code"] == -32600


def test_standalone_get_stream(http, server, live_world, alpha):
    assert http.get(alpha.endpoint, headers=alpha.headers(Accept="application/json")).status_code == 406
    with http.stream("GET", alpha.endpoint, headers=alpha.headers(Accept="text/event-stream")) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"] == "text/event-stream"
        assert stream.headers["x-accel-buffering"] == "no"
        lines = stream.iter_lines()
        priming = [next(lines), next(lines), next(lines)]
        assert priming[0].startswith("id: get.") and priming[1] == "retry: 1000" and priming[2] == "data: "
        second = http.get(alpha.endpoint, headers=alpha.headers(Accept="text/event-stream"))
        assert second.status_code == 409


def test_get_streams_opened_at_once_on_two_processes_leave_one_open(alpha, server, other_server):
    """Eight GETs of one session's stream at the same moment, half on each process: the
    session's stream claim lets exactly one through; the rest are told 409, and so is a GET
    to either process while the one stream is still held."""
    endpoints = [server.endpoint("live-alpha"), other_server.endpoint("live-alpha")]
    start = threading.Barrier(8)
    statuses: list[int] = []
    opened = threading.Event()
    asked_again = threading.Event()

    def open_stream(index: int) -> None:
        with httpx.Client(timeout=30) as client:
            start.wait()
            url = endpoints[index % 2]
            with client.stream("GET", url, headers=alpha.headers(Accept="text/event-stream")) as stream:
                statuses.append(stream.status_code)
                if stream.status_code == 200:
                    # Kept in a name: an httpx line iterator dropped half-read closes the
                    # connection (httpcore closes the response when its generator is
                    # finalized), and the server rightly gives the claim back.
                    lines = stream.iter_lines()
                    next(lines)  # primed: the claim is held
                    opened.set()
                    wait_for(asked_again.is_set, message="the test to ask again while the stream is held")

    threads = [threading.Thread(target=open_stream, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(statuses) == 8, message="every GET to be answered")
        again: list[int] = []
        for url in endpoints:  # the status only: a wrongly opened second stream would never end
            with httpx.stream("GET", url, headers=alpha.headers(Accept="text/event-stream"), timeout=30) as late:
                again.append(late.status_code)
    finally:
        asked_again.set()
        for thread in threads:
            thread.join(60)
    assert opened.is_set()
    assert sorted(statuses) == [200] + [409] * 7
    assert again == [409, 409]


def test_progress_streams_as_sse_with_priming(alpha):
    alpha.next_id += 1
    response = alpha.post(
        rpc(
            "tools/call",
            {"name": "countdown", "arguments": {"n": 2}, "_meta": {"progressToken": "tok-1"}},
            id=alpha.next_id,
        )
    )
    assert response.headers["content-type"] == "text/event-stream"
    events = parse_sse(response.text.split("\n"))
    assert events[0].data == "" and events[0].retry == 1000 and events[0].id
    messages = [e.message for e in events[1:]]
    assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2]
    assert all(m["params"]["progressToken"] == "tok-1" for m in messages[:-1])
    assert messages[-1]["id"] == alpha.next_id and "result" in messages[-1]
    ids = [e.id for e in events]
    assert len(set(ids)) == len(ids) and all(i.split(".")[0] == ids[0].split(".")[0] for i in ids)


def test_no_priming_for_older_sessions(http, server, live_world):
    old = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"], version="2025-06-18")
    response = old.post(
        rpc("tools/call", {"name": "countdown", "arguments": {"n": 1}, "_meta": {"progressToken": 7}}, id=5)
    )
    events = parse_sse(response.text.split("\n"))
    assert all(event.data for event in events)
    assert events[0].message["params"]["progressToken"] == 7  # the token's JSON type is kept


def test_accept_header_media_ranges(http, alpha):
    wildcard = http.post(alpha.endpoint, json=rpc("ping"), headers=alpha.headers(Accept="*/*"))
    assert wildcard.status_code == 200
    refused = http.post(
        alpha.endpoint,
        json=rpc("ping"),
        headers=alpha.headers(Accept=f"{ACCEPT_BOTH.split(',')[0]}, text/event-stream;q=0"),
    )
    assert refused.status_code == 406
