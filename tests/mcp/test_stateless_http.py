"""The 2026-07-28 Streamable HTTP leg on the wire: the checks' order, codes and statuses,
result shapes, multi-round state across processes, and a disconnect as the cancel.

Raw HTTP against the live servers, where exact headers and status codes matter; the
official SDK drives the same leg in test_sdk_modern.py.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import httpx
import pytest

from audit.models import Invocation, Outcome
from tests.mcp.wire import headers, note, rpc
from tests.poll import wait_for

pytestmark = pytest.mark.live

VERSION = "2026-07-28"
CAPABILITIES = {"elicitation": {}}


def envelope(params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        **(params or {}),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
            **meta,
        },
    }


def routing(key: str, method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    fields = {"MCP-Protocol-Version": VERSION, "Mcp-Method": method, **extra}
    if name is not None:
        fields["Mcp-Name"] = name
    return headers(key, **fields)


def post(http: httpx.Client, server: Any, body: Any, head: dict[str, str]) -> httpx.Response:
    return http.post(server.endpoint("live-alpha"), json=body, headers=head)


def call(http, server, key, name: str, arguments: dict, **params: Any) -> httpx.Response:
    body = rpc("tools/call", envelope({"name": name, "arguments": arguments, **params}), id=7)
    return post(http, server, body, routing(key, "tools/call", name))


def test_results_say_their_type_and_server_and_lists_may_be_cached(http, server, live_world):
    key = live_world.keys["alpha"]
    listed = post(http, server, rpc("tools/list", envelope()), routing(key, "tools/list"))
    assert listed.status_code == 200 and listed.headers["content-type"].startswith("application/json")
    result = listed.json()["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
    assert result["cacheScope"] == "private" and result["ttlMs"] > 0  # lists depend on the credential
    echoed = call(http, server, key, "echo", {"text": "hi"}).json()["result"]
    assert echoed["resultType"] == "complete" and "ttlMs" not in echoed


@pytest.mark.parametrize(
    ("body", "head", "status", "code"),
    [
        ([rpc("tools/list", envelope())], {"Mcp-Method": "tools/list"}, 400, -32600),
        (rpc("tools/list", {}), {"Mcp-Method": "tools/list"}, 400, -32602),
        (rpc("tools/list", envelope()), {}, 400, -32020),
        (rpc("tools/list", envelope()), {"Mcp-Method": "TOOLS/LIST"}, 400, -32020),
        (rpc("tools/call", envelope({"name": "echo"})), {"Mcp-Method": "tools/call"}, 400, -32020),
        (rpc("tools/call", envelope({"name": "echo"})), {"Mcp-Method": "tools/call", "Mcp-Name": "add"}, 400, -32020),
        (rpc("no/such", envelope()), {"Mcp-Method": "no/such"}, 404, -32601),
        (rpc("tasks/result", envelope({"taskId": "x"})), {"Mcp-Method": "tasks/result"}, 404, -32601),
        (rpc("ping", envelope()), {"Mcp-Method": "ping"}, 404, -32601),  # removed in this revision
    ],
    ids=[
        "batch",
        "no envelope",
        "no Mcp-Method",
        "Mcp-Method case",
        "no Mcp-Name",
        "Mcp-Name mismatch",
        "unknown method",
        "tasks/result removed",
        "ping removed",
    ],
)
def test_refusals_have_their_code_status_and_the_request_id(http, server, live_world, body, head, status, code):
    response = post(http, server, body, headers(live_world.keys["alpha"], **{"MCP-Protocol-Version": VERSION, **head}))
    assert response.status_code == status
    answer = response.json()
    assert answer["error"]["code"] == code
    assert answer["id"] == (None if isinstance(body, list) else 1)


def test_notifications_are_accepted_without_an_answer(http, server, live_world):
    body = note("notifications/cancelled", envelope({"requestId": 3}))
    response = post(http, server, body, routing(live_world.keys["alpha"], "notifications/cancelled"))
    assert (response.status_code, response.content) == (202, b"")


def test_routing_headers_may_be_base64(http, server, live_world):
    # (Padding with whitespace, which httpx refuses to send, is the conformance suite's check.)
    key = live_world.keys["alpha"]
    encoded = "=?base64?" + base64.b64encode(b"echo").decode() + "?="
    body = rpc("tools/call", envelope({"name": "echo", "arguments": {"text": "b64"}}))
    assert post(http, server, body, routing(key, "tools/call", encoded)).json()["result"]["content"][0]["text"] == "b64"


def test_x_mcp_header_arguments_must_be_mirrored(http, server, live_world):
    key = live_world.keys["alpha"]
    name, arguments = "test_mcp_header_param", {"region": "eu-west"}
    body = rpc("tools/call", envelope({"name": name, "arguments": arguments}))
    missing = post(http, server, body, routing(key, "tools/call", name))
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, -32020)
    wrong = post(http, server, body, routing(key, "tools/call", name, **{"Mcp-Param-Region": "us-east"}))
    assert wrong.json()["error"]["code"] == -32020
    right = post(http, server, body, routing(key, "tools/call", name, **{"Mcp-Param-Region": "eu-west"}))
    assert right.json()["result"]["content"][0]["text"] == "region=eu-west"


def test_a_retry_on_the_other_server_carries_the_answers_once(http, live_servers, live_world):
    first, second = live_servers
    key = live_world.keys["alpha"]
    asked = call(http, first, key, "test_input_required_result_elicitation", {}).json()["result"]
    assert asked["resultType"] == "input_required"
    assert asked["inputRequests"]["user_name"]["method"] == "elicitation/create"
    answers = {"user_name": {"action": "accept", "content": {"name": "Grace"}}}
    retry = {"inputResponses": answers, "requestState": asked["requestState"]}
    done = call(http, second, key, "test_input_required_result_elicitation", {}, **retry).json()["result"]
    assert done["content"][0]["text"] == "Hello, Grace!"
    replayed = call(http, first, key, "test_input_required_result_elicitation", {}, **retry).json()
    assert replayed["error"]["code"] == -32602 and "already used" in replayed["error"]["message"]
    stolen = call(http, second, live_world.keys["alpha2"], "test_input_required_result_elicitation", {}, **retry)
    assert stolen.json()["error"]["code"] == -32602  # bound to the credential that was asked


def test_closing_the_response_cancels_the_call(http, server, live_world, orm):
    key = live_world.keys["alpha"]
    body = rpc("tools/call", envelope({"name": "countdown", "arguments": {"n": 30}}, progressToken="p1"), id=41)
    opened = threading.Event()
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", server.endpoint("live-alpha"), json=body, headers=routing(key, "tools/call", "countdown")
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if '"notifications/progress"' in line:
                opened.set()
                break  # leaving the block closes the connection: the client's cancel
    assert opened.is_set()
    row = wait_for(
        lambda: (
            Invocation.objects.filter(tool_name="countdown", protocol_version=VERSION, outcome=Outcome.CANCELLED)
            .order_by("-started_at")
            .first()
        ),
        message="a cancelled countdown row",
    )
    assert row.session_id == ""


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def _task_request(http, server, key, method: str, task_id: str, **params: Any) -> dict:
    body = rpc(method, {**envelope({"taskId": task_id, **params}), "_meta": _tasks_meta()})
    return post(http, server, body, routing(key, method, task_id)).json()


def _tasks_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {**CAPABILITIES, **TASKS},
    }


def test_a_listen_stream_follows_a_task_changed_on_the_other_server(http, live_servers, live_world, live_workers):
    first, second = live_servers
    key = live_world.keys["alpha"]
    body = rpc("tools/call", {"name": "confirm_delete", "arguments": {"filename": "a.txt"}, "_meta": _tasks_meta()})
    created = post(http, first, body, routing(key, "tools/call", "confirm_delete")).json()["result"]
    assert created["resultType"] == "task"
    task_id = created["taskId"]
    wait_for(
        lambda: _task_request(http, second, key, "tasks/get", task_id)["result"]["status"] == "input_required",
        message="the task waiting for its confirmation",
    )
    listen = rpc("subscriptions/listen", {"notifications": {"taskIds": [task_id]}, "_meta": _tasks_meta()}, id="l1")
    heard: list[dict] = []
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", first.endpoint("live-alpha"), json=listen, headers=routing(key, "subscriptions/listen")
        ) as stream,
    ):
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            message = json.loads(line[6:])
            if message["method"] == "notifications/subscriptions/acknowledged":
                assert message["params"]["notifications"] == {"taskIds": [task_id]}
                answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
                acked = _task_request(http, second, key, "tasks/update", task_id, inputResponses=answer)
                assert acked["result"]["resultType"] == "complete"
                continue
            assert message["method"] == "notifications/tasks"
            assert message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "l1"
            heard.append(message["params"])
            if message["params"]["status"] == "completed":
                break
    assert heard[-1]["taskId"] == task_id
    assert heard[-1]["result"]["content"][0]["text"] == "Deleted a.txt."
