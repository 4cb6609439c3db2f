"""Streams across processes: resumption, answers and cancellation reaching the right call."""

from __future__ import annotations

import time

import httpx
import pytest

from mcp_platform.mcp import names
from mcp_platform.mcp.calls import request_key
from mcp_platform.redis_clients import sync_redis
from tests.mcp.wire import McpSession, SseEvent, note, parse_sse, rpc
from tests.poll import wait_for

pytestmark = pytest.mark.live


def _read_events(stream: httpx.Response, count: int) -> list[SseEvent]:
    lines: list[str] = []
    events: list[SseEvent] = []
    for line in stream.iter_lines():
        lines.append(line)
        if line == "":
            events = parse_sse(lines)
            if len(events) >= count:
                return events
    return parse_sse(lines)


def test_sessions_are_shared_between_processes(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    for i in range(6):
        session.endpoint = (server if i % 2 else other_server).endpoint("live-alpha")
        answer = session.request("tools/call", {"name": "echo", "arguments": {"text": f"turn {i}"}})
        assert answer["result"]["content"][0]["text"] == f"turn {i}"
    assert session.request("logging/setLevel", {"level": "error"})["result"] == {}


def test_dropped_stream_resumes_on_another_process_without_loss_or_duplicates(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    call = rpc("tools/call", {"name": "countdown", "arguments": {"n": 6}, "_meta": {"progressToken": "p"}}, id=41)
    with http.stream("POST", session.endpoint, json=call, headers=session.headers()) as stream:
        first = _read_events(stream, 3)  # priming + two progress events, then the client "drops"
    assert first[0].data == ""
    seen = [e.message["params"]["progress"] for e in first[1:]]
    last_id = first[-1].id

    resumed = other_server.endpoint("live-alpha")
    response = http.get(resumed, headers=session.headers(Accept="text/event-stream", **{"Last-Event-ID": last_id}))
    assert response.status_code == 200
    rest = [e for e in parse_sse(response.text.split("\n")) if e.data]
    progress = seen + [e.message["params"]["progress"] for e in rest if e.message.get("method")]
    assert progress == [1, 2, 3, 4, 5, 6]
    assert rest[-1].message == {
        "jsonrpc": "2.0",
        "id": 41,
        "result": {"content": [{"type": "text", "text": "Countdown from 6 finished."}]},
    }
    all_ids = [e.id for e in first] + [e.id for e in rest]
    assert len(all_ids) == len(set(all_ids))

    again = http.get(resumed, headers=session.headers(Accept="text/event-stream", **{"Last-Event-ID": rest[-2].id}))
    assert [e.message for e in parse_sse(again.text.split("\n")) if e.data] == [rest[-1].message]


def test_server_closes_early_and_client_polls_for_the_result(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    response = session.post(rpc("tools/call", {"name": "test_reconnection", "arguments": {}}, id=7))
    events = parse_sse(response.text.split("\n"))
    assert len(events) == 1 and events[0].data == "" and events[0].retry == 1000
    # No need to wait for the result: a resumed stream follows the call until its response.
    replay = http.get(
        other_server.endpoint("live-alpha"),
        headers=session.headers(Accept="text/event-stream", **{"Last-Event-ID": events[0].id}),
    )
    messages = [e.message for e in parse_sse(replay.text.split("\n")) if e.data]
    assert messages == [
        {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "Reconnection test completed"}]}}
    ]


def test_elicitation_answer_posted_to_another_process_reaches_the_call(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    call = rpc("tools/call", {"name": "test_elicitation", "arguments": {"message": "Name?"}}, id=3)
    with http.stream("POST", session.endpoint, json=call, headers=session.headers()) as stream:
        lines = stream.iter_lines()
        collected: list[str] = []
        request = None
        for line in lines:
            collected.append(line)
            events = [e for e in parse_sse(collected) if e.data]
            if events:
                request = events[0].message
                break
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Name?"
        answer = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"action": "accept", "content": {"username": "grace", "email": "g@example.com"}},
        }
        with httpx.Client(timeout=10) as other:
            posted = other.post(other_server.endpoint("live-alpha"), json=answer, headers=session.headers())
        assert posted.status_code == 202
        rest = [e.message for e in parse_sse(list(lines)) if e.data]
    assert rest[-1]["id"] == 3
    assert "g@example.com" in rest[-1]["result"]["content"][0]["text"]


def test_cancellation_sent_to_another_process_stops_the_call(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    call = rpc("tools/call", {"name": "countdown", "arguments": {"n": 50}, "_meta": {"progressToken": "c"}}, id=11)
    started = time.monotonic()
    pending = session.post_in_thread(call)
    # The running call registers itself for cancellations (after 50 ms): cancel it then,
    # through the other process.
    inflight = names.inflight_key(session.session_id, request_key(11))
    wait_for(lambda: sync_redis().exists(inflight), message="the countdown to be running")
    cancelled = http.post(
        other_server.endpoint("live-alpha"),
        json=note("notifications/cancelled", {"requestId": 11, "reason": "user"}),
        headers=session.headers(),
    )
    assert cancelled.status_code == 202
    response = pending.response()
    elapsed = time.monotonic() - started
    messages = [e.message for e in parse_sse(response.text.split("\n")) if e.data]
    assert all("method" in m for m in messages), "a cancelled request gets no response"
    assert len(messages) < 10
    assert elapsed < 5, "countdown of 50 (10 s) must stop soon after the cancellation"


def test_cancellation_arriving_before_registration_is_honoured(http, server, other_server, live_world):
    session = McpSession.open(http, server.endpoint("live-alpha"), live_world.keys["alpha"])
    parked = http.post(
        other_server.endpoint("live-alpha"),
        json=note("notifications/cancelled", {"requestId": "early"}),
        headers=session.headers(),
    )
    assert parked.status_code == 202
    started = time.monotonic()
    response = session.post(rpc("tools/call", {"name": "countdown", "arguments": {"n": 20}}, id="early"))
    assert time.monotonic() - started < 3
    assert response.status_code in (200, 202)
    assert "result" not in response.text


def test_calls_share_their_process_inbox_and_a_cancellation_reaches_only_its_call(
    http, server, other_server, live_world
):
    """Two calls running in one process register addresses in that process's one inbox (one
    channel, a token each); a cancellation posted to the other process stops only its own."""
    key = live_world.keys["alpha"]
    first = McpSession.open(http, server.endpoint("live-alpha"), key)
    second = McpSession.open(http, server.endpoint("live-alpha"), key)
    doomed = first.post_in_thread(rpc("tools/call", {"name": "countdown", "arguments": {"n": 50}}, id=21))
    kept = second.post_in_thread(rpc("tools/call", {"name": "countdown", "arguments": {"n": 10}}, id=22))
    keys = [
        names.inflight_key(first.session_id, request_key(21)),
        names.inflight_key(second.session_id, request_key(22)),
    ]
    wait_for(lambda: all(sync_redis().exists(k) for k in keys), message="both countdowns to be registered")
    addresses = [sync_redis().get(k).decode() for k in keys]
    channels = {address.split(" ", 1)[0] for address in addresses}
    tokens = {address.split(" ", 1)[1] for address in addresses}
    assert len(channels) == 1, addresses  # one inbox for the process
    assert len(tokens) == 2, addresses  # each call its own address in it
    cancelled = http.post(
        other_server.endpoint("live-alpha"),
        json=note("notifications/cancelled", {"requestId": 21, "reason": "user"}),
        headers=first.headers(),
    )
    assert cancelled.status_code == 202
    stopped = [e.message for e in parse_sse(doomed.response().text.split("\n")) if e.data]
    assert all("method" in m for m in stopped), "a cancelled request gets no response"
    response = kept.response()
    if response.headers["content-type"].startswith("application/json"):
        answer = response.json()
    else:
        answer = [e.message for e in parse_sse(response.text.split("\n")) if e.data][-1]
    assert answer["id"] == 22 and "result" in answer, answer
    wait_for(lambda: not any(sync_redis().exists(k) for k in keys), message="both registrations released")
