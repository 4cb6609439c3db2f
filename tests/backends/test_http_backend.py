"""The http backend against a real HTTP server on loopback (opened through the allow-list)."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from tests.backends.calls import PNG, call, text_of
from tools_app.backends.vault import secret_set
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.context import ToolContext
from tools_app.runs.execution import execute
from tools_app.runs.trial_calls import RecordingLink

OBJECT = {"type": "object"}


@pytest.fixture(autouse=True)
def _open_local_api(api, allow):
    allow(api.host_port)


def test_templated_get_escapes_path_and_query_and_sends_the_rest_as_query(api, http_tool):
    tool = http_tool(
        "posts",
        {
            "url": f"{api.origin}/users/{{user}}/posts?sort={{sort}}",
            "query": {"per_page": "{limit}", "fixed": "yes", "optional": "{missing}"},
        },
    )
    outcome = call(tool, {"user": "ada lovelace/../admin", "sort": "new&old=1", "limit": 5, "tags": ["a", "b"]})

    assert outcome.is_error is False, outcome.result
    [seen] = api.requests
    assert seen.method == "GET"
    # The argument stays one path segment: "/" and spaces are escaped, nothing is resolved.
    assert seen.path == "/users/ada%20lovelace%2F..%2Fadmin/posts"
    assert seen.query == {"sort": ["new&old=1"], "per_page": ["5"], "fixed": ["yes"], "tags": ["a", "b"]}
    assert seen.body == b""
    # Without an outputSchema, JSON comes back as a text block.
    assert json.loads(text_of(outcome))["query"]["sort"] == ["new&old=1"]
    assert "structuredContent" not in outcome.result


def test_dot_segments_cannot_climb_the_path(api, http_tool):
    tool = http_tool("dots", {"url": f"{api.origin}/users/{{user}}/posts"})
    assert call(tool, {"user": ".."}).is_error is False
    assert api.requests[0].path == "/users/%2E%2E/posts"


def test_json_post_gives_structured_content_checked_against_the_output_schema(api, http_tool):
    schema = {
        "type": "object",
        "properties": {"method": {"const": "POST"}, "received": {"type": "object"}},
        "required": ["method", "received"],
    }
    tool = http_tool(
        "create_item",
        {"method": "POST", "url": f"{api.origin}/echo?id={{id}}"},
        input_schema={"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
        output_schema=schema,
    )
    outcome = call(tool, {"id": 7, "name": "Widget", "tags": {"x": 1}})

    assert outcome.is_error is False, outcome.result
    [seen] = api.requests
    assert seen.query == {"id": ["7"]}
    assert json.loads(seen.body) == {"name": "Widget", "tags": {"x": 1}}  # what the URL used is not repeated
    assert seen.headers["content-type"] == "application/json"
    structured = outcome.result["structuredContent"]
    assert structured["received"] == {"name": "Widget", "tags": {"x": 1}}
    assert json.loads(outcome.result["content"][0]["text"]) == structured


def test_body_template_maps_arguments_with_their_json_types(api, http_tool):
    tool = http_tool(
        "templated",
        {
            "method": "PUT",
            "url": f"{api.origin}/echo",
            "body": {"template": {"item": {"count": "{n}", "label": "n={n}", "note": "{note}"}, "all": "{$arguments}"}},
            "headers": {"X-Request-Label": "label-{n}"},
        },
    )
    outcome = call(tool, {"n": 3})
    assert outcome.is_error is False, outcome.result
    [seen] = api.requests
    assert json.loads(seen.body) == {"item": {"count": 3, "label": "n=3"}, "all": {"n": 3}}
    assert seen.headers["x-request-label"] == "label-3"


def test_response_pointer_picks_part_of_the_json(api, http_tool):
    tool = http_tool(
        "items",
        {"url": f"{api.origin}/nested", "response": {"pointer": "/data"}},
        output_schema={"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]},
    )
    outcome = call(tool)
    assert outcome.result["structuredContent"] == {"items": [{"id": 7}]}


@pytest.mark.parametrize(
    ("auth", "expected_header", "expected_value"),
    [
        ({"type": "bearer", "secret": "api-token"}, "authorization", "Bearer tok-8c1f9e2d"),
        (
            {"type": "basic", "secret": "api-token", "username": "ada"},
            "authorization",
            "Basic " + base64.b64encode(b"ada:tok-8c1f9e2d").decode(),
        ),
        ({"type": "header", "secret": "api-token", "header": "X-Api-Key"}, "x-api-key", "tok-8c1f9e2d"),
        (
            {"type": "header", "secret": "api-token", "header": "X-Api-Key", "prefix": "Key "},
            "x-api-key",
            "Key tok-8c1f9e2d",
        ),
    ],
)
def test_auth_comes_from_the_encrypted_secret(api, http_tool, auth, expected_header, expected_value):
    secret_set(tenant=None, name="api-token", value="tok-8c1f9e2d")
    tool = http_tool("whoami", {"url": f"{api.origin}/whoami", "auth": auth})
    outcome = call(tool)
    assert outcome.result.get("isError") is None, outcome.result
    assert api.requests[0].headers[expected_header] == expected_value
    assert json.loads(text_of(outcome)) == {"authenticated": True}


def test_a_tenant_tool_uses_its_own_tenants_secret_only(api, http_tool, acme, globex):
    secret_set(tenant=acme, name="api-token", value="acme-secret-value")
    with pytest.raises(ValidationError) as excinfo:
        http_tool("platform_whoami", {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}})
    assert "no secret named 'api-token' among the platform's secrets" in str(excinfo.value)
    with pytest.raises(ValidationError):
        http_tool(
            "globex_whoami",
            {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}},
            tenant=globex,
        )
    tool = http_tool(
        "acme_whoami", {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}}, tenant=acme
    )
    assert call(tool).is_error is False
    assert api.requests[0].headers["authorization"] == "Bearer acme-secret-value"


def test_a_secret_deleted_after_the_tool_was_saved_fails_the_call_clearly(api, http_tool):
    secret = secret_set(tenant=None, name="short-lived", value="sl-value-123")
    tool = http_tool("whoami", {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "short-lived"}})
    secret.delete()
    outcome = call(tool)
    assert outcome.is_error
    assert "secret 'short-lived' is not configured" in text_of(outcome)
    assert api.requests == []


def test_non_2xx_is_an_error_result_with_status_and_trimmed_body(api, http_tool):
    tool = http_tool("missing", {"url": f"{api.origin}/status/404?x=1"})
    outcome = call(tool)
    assert outcome.is_error
    text = text_of(outcome)
    assert text.startswith(f"HTTP 404 Not Found from {api.origin}/status/404: something went wrong")
    assert text.endswith("…")
    assert len(text) < 700
    assert "x=1" not in text  # the query string (which may carry arguments) is not echoed


def test_server_errors_are_retried_for_idempotent_tools_only(api, http_tool, settings):
    settings.TOOLBAY_RETRY_BACKOFF_SECONDS = 0.01
    settings.TOOLBAY_MAX_RETRIES = 2
    once = http_tool("unavailable_once", {"url": f"{api.origin}/status/503?body=busy"})
    outcome = call(once)
    assert outcome.is_error
    assert "HTTP 503 Service Unavailable" in text_of(outcome) and "busy" in text_of(outcome)
    assert len(api.requests) == 1

    api.requests.clear()
    idempotent = http_tool("unavailable", {"url": f"{api.origin}/status/503?body=busy"}, idempotent_hint=True)
    assert call(idempotent).is_error
    assert len(api.requests) == 3


def test_timeout(api, http_tool):
    tool = http_tool("slow", {"url": f"{api.origin}/slow?seconds=2", "timeout_seconds": 0.3})
    outcome = call(tool)
    assert outcome.is_error
    assert "timed out after 0.3 seconds" in text_of(outcome)
    assert outcome.duration_ms < 1500


def test_the_tool_timeout_applies_when_the_config_has_none(api, http_tool):
    tool = http_tool("slow_tool", {"url": f"{api.origin}/slow?seconds=2"}, timeout_seconds=0.3)
    outcome = call(tool)
    assert outcome.is_error
    assert "timed out after 0.3 seconds" in text_of(outcome)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_response_size_is_capped(api, http_tool, settings, chunked):
    settings.TOOLBAY_HTTP_MAX_RESPONSE_BYTES = 4096
    suffix = "&chunked=1" if chunked else ""
    tool = http_tool("big", {"url": f"{api.origin}/big?bytes=50000{suffix}"})
    outcome = call(tool)
    assert outcome.is_error
    assert "too large" in text_of(outcome) and "4096 bytes" in text_of(outcome)

    small = http_tool("small", {"url": f"{api.origin}/big?bytes=4000{suffix}"})
    assert call(small).is_error is False


def test_output_schema_violation_is_an_error(api, http_tool):
    tool = http_tool(
        "typed",
        {"url": f"{api.origin}/json?value=" + '{"count":"many"}'},
        output_schema={"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]},
    )
    outcome = call(tool)
    assert outcome.is_error
    assert "does not match its outputSchema" in text_of(outcome)
    assert "'count'" in text_of(outcome)


def test_json_that_is_not_an_object_cannot_be_structured(api, http_tool):
    tool = http_tool("listy", {"url": f"{api.origin}/json-list"}, output_schema={"type": "object"})
    outcome = call(tool)
    assert outcome.is_error
    assert "JSON list" in text_of(outcome)


def test_content_types_map_to_content_blocks(api, http_tool):
    image = call(http_tool("image", {"url": f"{api.origin}/image"}))
    assert image.result["content"] == [
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}
    ]
    text = call(http_tool("text", {"url": f"{api.origin}/text"}))
    assert text.result["content"] == [{"type": "text", "text": "plain words, ünïcode"}]
    pdf = call(http_tool("pdf", {"url": f"{api.origin}/pdf"}))
    [block] = pdf.result["content"]
    assert block["type"] == "resource"
    assert block["resource"]["mimeType"] == "application/pdf"
    assert base64.b64decode(block["resource"]["blob"]) == b"%PDF-1.4 fake"
    empty = call(http_tool("empty", {"method": "DELETE", "url": f"{api.origin}/no-content"}))
    assert empty.result["content"] == [{"type": "text", "text": "HTTP 204 No Content (empty response)"}]


def test_redirects_are_followed_within_the_limit(api, http_tool, settings):
    settings.TOOLBAY_HTTP_MAX_REDIRECTS = 2
    target = f"{api.origin}/text"
    once = http_tool("once", {"url": f"{api.origin}/redirect?to={target}"})
    assert text_of(call(once)) == "plain words, ünïcode"

    loop = f"{api.origin}/redirect?to={api.origin}/redirect%3Fto%3D{api.origin}/redirect%253Fto%253D{target}"
    outcome = call(http_tool("loop", {"url": loop}))
    assert outcome.is_error
    assert "Too many redirects (the limit is 2)" in text_of(outcome)

    api.requests.clear()
    held = http_tool("held", {"url": f"{api.origin}/redirect?to={target}", "follow_redirects": False})
    outcome = call(held)
    assert outcome.is_error is False
    assert text_of(outcome) == f"HTTP 302 Found: redirect to {target}"
    assert [r.path for r in api.requests] == ["/redirect"]


def test_a_cross_origin_redirect_does_not_carry_the_credential(api, other_api, allow, http_tool):
    allow(api.host_port, other_api.host_port)
    secret_set(tenant=None, name="api-token", value="tok-8c1f9e2d")
    tool = http_tool(
        "hop",
        {
            "url": f"{api.origin}/redirect?to={other_api.origin}/whoami",
            "auth": {"type": "header", "secret": "api-token", "header": "X-Api-Key"},
        },
    )
    outcome = call(tool)
    assert json.loads(text_of(outcome)) == {"authenticated": False}
    assert api.requests[0].headers["x-api-key"] == "tok-8c1f9e2d"
    assert "x-api-key" not in other_api.requests[0].headers


def test_redirect_to_another_scheme_is_refused(api, http_tool):
    outcome = call(http_tool("ftp", {"url": f"{api.origin}/redirect?to=ftp://example.com/file"}))
    assert outcome.is_error
    assert "ftp" in text_of(outcome)


def test_an_unreachable_host_is_a_failure_not_a_crash(http_tool, allow, unused_tcp_port):
    allow(f"127.0.0.1:{unused_tcp_port}")
    outcome = call(http_tool("down", {"url": f"http://127.0.0.1:{unused_tcp_port}/x"}))
    assert outcome.is_error
    assert "Tool 'down' failed: could not reach 127.0.0.1" in text_of(outcome)


def test_missing_url_argument_is_named(api, http_tool):
    tool = http_tool("user", {"url": f"{api.origin}/users/{{user}}"})
    outcome = call(tool, {})
    assert outcome.is_error
    assert "The argument 'user' is required (the URL uses it)." in text_of(outcome)
    assert api.requests == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"url": "https://{host}/x"}, "never the host or port"),
        ({"url": "https://api.example.com:{port}/x"}, "never the host or port"),
        ({"url": "ftp://api.example.com/x"}, "absolute http:// or https:// URL"),
        ({"url": "https://user:pw@api.example.com/x"}, "must not carry credentials"),
        ({"url": "https://api.example.com", "method": "FETCH"}, '"method" must be one of'),
        ({"url": "https://api.example.com", "headers": {"Host": "evil"}}, "is not a header a tool may set"),
        ({"url": "https://api.example.com", "body": {"template": {}}}, "a GET request has no body"),
        ({"url": "https://api.example.com", "auth": {"type": "bearer"}}, 'needs "secret"'),
        ({"url": "https://api.example.com", "auth": {"type": "oauth", "secret": "x"}}, '"auth" must be'),
        ({"url": "https://api.example.com", "timeout_seconds": 0}, '"timeout_seconds"'),
        ({"url": "https://api.example.com", "retries": 3}, "unknown http settings ['retries']"),
        ({"url": "https://api.example.com", "response": {"pointer": "data"}}, "JSON pointer"),
    ],
)
def test_bad_settings_are_refused_with_a_message(http_tool, config, message):
    with pytest.raises(ValidationError) as excinfo:
        http_tool("bad", config)
    assert message in str(excinfo.value.message_dict["backend_config"])


@pytest.mark.parametrize("path", ["/whoami", "/status/500", "/slow?seconds=3"])
def test_nothing_runs_on_after_an_http_call(api, http_tool, path):
    """Workers kill their process when a handler is not known to have stopped (tools_app/worker.py):
    an HTTP call is over when its await is, whatever the outcome, timeout included."""
    tool = http_tool("probe", {"url": f"{api.origin}{path}", "timeout_seconds": 0.3}, timeout_seconds=0.5)
    ctx = ToolContext(RecordingLink(), tool_name="probe", confirmation="none")
    spec = ToolSpec.from_model(tool)  # reads the tool's curation: outside the event loop

    async def run() -> None:
        with contextlib.suppress(Exception):
            await execute(spec, {}, ctx)

    async_to_sync(run)()
    assert ctx.handler_returned.is_set()
