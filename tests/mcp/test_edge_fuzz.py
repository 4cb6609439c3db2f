"""Property-based run of malformed and hostile bodies against a real server: never a 5xx,
always a JSON-RPC answer in valid UTF-8 JSON (or an empty 202).

The bodies are drawn from what broke servers before: random bytes, deep nesting, lone
surrogate escapes, NUL characters, huge numbers, odd ids and methods, batches of junk,
and well-formed calls carrying hostile text. Each goes to both protocol legs (a 2025-03-26
session, which allows batches, and the 2026-07-28 stateless leg) of a live uvicorn server.

Bounded for CI: ``TOOLBAY_EDGE_FUZZ_EXAMPLES`` examples per leg (default 300),
derandomized so a run is reproducible.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mcp.wire import INIT_PARAMS, headers, note, rpc

pytestmark = pytest.mark.live

EXAMPLES = int(os.environ.get("TOOLBAY_EDGE_FUZZ_EXAMPLES", "300"))
MODERN = "2026-07-28"
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text that hurt before: NUL, lone surrogates (as JSON escapes), non-BMP, control characters.
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["a\x00b", "\x00", "\U0001f600", "\u2028", "\x7f", "é" * 30, "\\", '"']),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    HOSTILE_TEXT,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)),
    max_leaves=12,
)
METHODS = st.one_of(
    st.sampled_from(
        ["tools/call", "tools/list", "ping", "initialize", "resources/read", "prompts/get", "completion/complete"]
    ),
    HOSTILE_TEXT,
)


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", errors="surrogatepass")


@st.composite
def messages(draw: st.DrawFn) -> Any:
    message: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0", None]))}
    if draw(st.booleans()):
        message["id"] = draw(json_scalars)
    message["method"] = draw(METHODS)
    params = draw(
        st.one_of(
            json_values,
            st.fixed_dictionaries({"name": st.sampled_from(["echo", "add", "nope"]), "arguments": json_values}),
            st.fixed_dictionaries(
                {"name": st.just("echo"), "arguments": st.fixed_dictionaries({"text": HOSTILE_TEXT})}
            ),
        )
    )
    if isinstance(params, dict):
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN}
    message["params"] = params
    return message


def _nested(depth: int, opening: str) -> bytes:
    closing = "]" if opening == "[" else "}"
    inner = opening if opening == "[" else '{"a":'
    return (inner * depth + "1" + closing * depth).encode()


bodies = st.one_of(
    st.binary(max_size=200),
    st.builds(_nested, st.integers(min_value=1, max_value=5000), st.sampled_from(["[", "{"])),
    st.sampled_from(
        [
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\udfff","arguments":{}}}',
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\\ud800"}}}',
            b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}',
            b"\xef\xbb\xbf{}",
            b"\xff\xfe{\x00}\x00",
            b"[]",
            b"[[]]",
            b"null",
        ]
    ),
    st.builds(_dump, messages()),
    st.builds(_dump, st.lists(messages(), min_size=1, max_size=8)),
    st.builds(_dump, json_values),
)


def _assert_answered(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code == 202:
        return
    content_type = response.headers.get("content-type", "")
    raw = response.content
    raw.decode("utf-8")  # strict: valid UTF-8 or the test fails
    if content_type.startswith("text/event-stream"):
        datas = [line[5:].strip() for line in raw.decode().split("\n") if line.startswith("data:")]
        assert datas, raw[:500]
        for data in datas:
            assert json.loads(data)["jsonrpc"] == "2.0"
        return
    assert content_type.startswith("application/json"), (content_type, raw[:500])
    answer = json.loads(raw)
    for message in answer if isinstance(answer, list) else [answer]:
        assert message["jsonrpc"] == "2.0"
        assert "result" in message or "error" in message, message


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def legacy_headers(http: httpx.Client, live_servers: Any, live_world: Any) -> dict[str, str]:
    """An initialized 2025-03-26 session (the revision that still allows batches)."""
    endpoint = live_servers[0].endpoint("live-alpha")
    key = live_world.keys["alpha"]
    init = http.post(
        endpoint, json=rpc("initialize", dict(INIT_PARAMS, protocolVersion="2025-03-26")), headers=headers(key)
    )
    session = init.headers["mcp-session-id"]
    result = headers(key, session, **{"MCP-Protocol-Version": "2025-03-26"})
    assert http.post(endpoint, json=note("notifications/initialized"), headers=result).status_code == 202
    return result


@FUZZ_SETTINGS
@given(body=bodies)
def test_legacy_leg_answers_every_body_without_a_5xx(http, live_servers, legacy_headers, body):
    _assert_answered(http.post(live_servers[0].endpoint("live-alpha"), content=body, headers=legacy_headers))


@FUZZ_SETTINGS
@given(body=bodies, method=st.sampled_from(["tools/call", "ping", "tools/list", "x y"]))
def test_stateless_leg_answers_every_body_without_a_5xx(http, live_servers, live_world, body, method):
    head = headers(live_world.keys["alpha"], **{"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
    _assert_answered(http.post(live_servers[0].endpoint("live-alpha"), content=body, headers=head))
