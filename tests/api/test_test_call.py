"""POST /api/v1/tools/{id}/test-call/: the real call path, answered as an MCP client would see it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def call(client, tool, arguments=None):
    body = {} if arguments is None else {"arguments": arguments}
    return client.post(f"/api/v1/tools/{tool.pk}/test-call/", body, format="json")


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("admin", 200), ("operator", 403), ("viewer", 403)])
def test_who_runs_test_calls(role, status, as_role, acme, make_tool) -> None:
    tool = make_tool("echo", tenant=acme)
    response = call(as_role(role), tool, {"text": "hello"})
    assert response.status_code == status
    if status == 200:
        body = response.json()
        assert body["result"] == {"content": [{"type": "text", "text": "hello"}]}
        assert body["is_error"] is False and body["notifications"] == []
        assert body["duration_ms"] >= 0


def test_other_tenants_and_platform_tools_look_missing(globex_admin, client_for, acme, make_tool) -> None:
    client = client_for(globex_admin)
    assert call(client, make_tool("echo", tenant=acme), {"text": "x"}).status_code == 404
    assert call(client, make_tool("shared"), {"text": "x"}).status_code == 404


def test_platform_admins_try_platform_tools(superuser, client_for, make_tool) -> None:
    response = call(client_for(superuser), make_tool("shared"), {"text": "x"})
    assert response.status_code == 200 and response.json()["is_error"] is False


def test_invalid_arguments_are_an_error_result(as_role, acme, make_tool) -> None:
    tool = make_tool("echo", tenant=acme)
    body = call(as_role("admin"), tool, {"text": 5}).json()
    assert body["is_error"] is True
    message = body["result"]["content"][0]["text"]
    assert "'text'" in message and "inputSchema of 'echo'" in message


def test_arguments_must_be_an_object(as_role, acme, make_tool) -> None:
    response = call(as_role("admin"), make_tool("echo", tenant=acme), ["hello"])
    assert response.status_code == 400
    assert response.json() == {"arguments": ["Expected a JSON object, got list."]}


def test_disabled_tools_can_be_tried(as_role, acme, make_tool) -> None:
    tool = make_tool("echo", tenant=acme, enabled=False)
    assert call(as_role("admin"), tool, {"text": "still here"}).json()["is_error"] is False


def test_progress_is_collected(as_role, acme, make_tool) -> None:
    tool = make_tool(
        "countdown",
        tenant=acme,
        handler="demo.countdown",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    body = call(as_role("admin"), tool, {"n": 2}).json()
    assert body["result"]["content"][0]["text"] == "Countdown from 2 finished."
    assert [(n["method"], n["params"]["progress"], n["params"]["total"]) for n in body["notifications"]] == [
        ("notifications/progress", 1, 2),
        ("notifications/progress", 2, 2),
    ]


def test_log_messages_are_collected(as_role, acme, make_tool) -> None:
    tool = make_tool("logging", tenant=acme, handler="conformance.logging", input_schema={"type": "object"})
    body = call(as_role("admin"), tool).json()
    assert body["is_error"] is False
    assert [n["params"]["data"] for n in body["notifications"] if n["method"] == "notifications/message"] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]


@pytest.mark.parametrize(
    ("handler", "arguments", "message"),
    [
        ("conformance.elicitation", {"message": "Who are you?"}, "does not support elicitation"),
        ("conformance.sampling", {"prompt": "Hi"}, "does not support it"),
    ],
)
def test_elicitation_and_sampling_are_refused_clearly(as_role, acme, make_tool, handler, arguments, message) -> None:
    tool = make_tool("asks", tenant=acme, handler=handler, input_schema={"type": "object"})
    body = call(as_role("admin"), tool, arguments).json()
    assert body["is_error"] is True
    assert message in body["result"]["content"][0]["text"]


def test_output_schema_is_checked(as_role, acme, make_tool) -> None:
    tool = make_tool("echo", tenant=acme, output_schema={"type": "object", "properties": {"sum": {"type": "number"}}})
    body = call(as_role("admin"), tool, {"text": "not structured"}).json()
    assert body["is_error"] is True
    assert "declares an outputSchema" in body["result"]["content"][0]["text"]


def test_tool_errors_are_results(as_role, acme, make_tool) -> None:
    tool = make_tool("error", tenant=acme, handler="conformance.error", input_schema={"type": "object"})
    body = call(as_role("admin"), tool).json()
    assert body["is_error"] is True
    assert body["result"]["content"][0]["text"] == "This tool intentionally returns an error for testing"


def test_timeout_is_capped(as_role, acme, make_tool, settings) -> None:
    settings.TOOLBAY_TEST_CALL_TIMEOUT_SECONDS = 0.3
    tool = make_tool(
        "countdown",
        tenant=acme,
        handler="demo.countdown",
        timeout_seconds=600,
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    body = call(as_role("admin"), tool, {"n": 10}).json()
    assert body["is_error"] is True
    assert body["result"]["content"][0]["text"] == "Tool 'countdown' timed out after 0.3 seconds."
