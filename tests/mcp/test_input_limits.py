"""The engine's edge rules on their own: input limits, the per-session share, the one rule
for text the database or UTF-8 cannot hold, and which faults mean "a dependency is missing"."""

from __future__ import annotations

import orjson
import pytest
import redis
from django.db import OperationalError

from mcp_platform.faults import is_unavailable
from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.jsonrpc import JsonRpcError
from mcp_platform.mcp.limits import InFlight, InputLimits
from mcp_platform.mcp.text import encodable, storable, unstorable

LIMITS = InputLimits(
    max_depth=4, max_string_chars=300, max_batch_requests=3, batch_concurrency=2, session_max_in_flight=2
)


def _check(value):
    body = orjson.dumps(value)
    LIMITS.check(body, orjson.loads(body))


def _nested(depth, leaf="x"):
    value = leaf
    for n in range(depth):
        value = [value] if n % 2 else {"k": value}
    return value


def test_depth_up_to_the_limit_passes_and_one_more_is_refused():
    _check(_nested(4))
    with pytest.raises(JsonRpcError) as refused:
        _check(_nested(5))
    assert refused.value.code == jsonrpc.INVALID_REQUEST and refused.value.http_status == 400
    assert "nested deeper than 4 levels" in refused.value.message


@pytest.mark.parametrize("value", [{"k": "x" * 301}, {"x" * 301: 1}, ["y" * 400]])
def test_a_string_or_key_past_the_limit_is_refused(value):
    with pytest.raises(JsonRpcError, match="longer than 300 characters"):
        _check(value)


def test_brackets_inside_strings_do_not_count_as_nesting():
    _check({"text": "[[[[[[[[{{{{{{{"})


def test_batch_size():
    LIMITS.check_batch(3)
    with pytest.raises(JsonRpcError, match="at most 3 messages, got 4"):
        LIMITS.check_batch(4)


def test_in_flight_admits_up_to_the_limit_per_session_and_forgets_idle_sessions():
    gate = InFlight(2)
    with gate.enter("a") as first, gate.enter("a") as second:
        with gate.enter("a") as third, gate.enter("b") as other:
            assert (first, second, third, other) == (True, True, False, True)
        assert gate.running("a") == 2
    assert gate.running("a") == 0 and not gate._running


def test_one_rule_for_nul_and_lone_surrogates():
    value = {"a\x00": ["x\x00y", "lone \ud800", 3, None], "n": {"deep": "\x00"}}
    assert storable(value) == {"a\\u0000": ["x\\u0000y", "lone \ufffd", 3, None], "n": {"deep": "\\u0000"}}
    # On the wire NUL stays; only what UTF-8 cannot carry is replaced.
    assert encodable(value) == {"a\x00": ["x\x00y", "lone \ufffd", 3, None], "n": {"deep": "\x00"}}
    assert jsonrpc.dumps({"t": "lone \udfff"}).decode("utf-8") == '{"t":"lone \ufffd"}'


def test_unavailability_is_recognised_through_the_cause_chain():
    assert is_unavailable(redis.ConnectionError("refused"))
    assert is_unavailable(redis.TimeoutError("slow"))
    assert is_unavailable(OperationalError("no database"))
    try:
        try:
            raise redis.ConnectionError("lost")
        except redis.ConnectionError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert is_unavailable(wrapped)
    assert not is_unavailable(ValueError("a bug"))
    assert not is_unavailable(redis.ResponseError("WRONGTYPE"))


def test_unstorable_finds_nul_and_lone_surrogates_anywhere():
    assert not unstorable({"a": ["b", 1, {"c": None}]})
    assert unstorable({"a": ["b", {"c": "x\x00"}]})
    assert unstorable({"k\ud800": 1})
