"""requestState of multi-round calls (2026-07-28): sealed, bound to its request, single-use.

Real Redis (the suite's db) holds the used nonces.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings

from mcp_platform.mcp import request_state
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError
from mcp_platform.mcp.request_state import RequestStateCodec
from mcp_platform.redis_batch import CommandBatch

PARAMS = {"name": "book", "arguments": {"room": "A"}}
ANSWERS = {"user_name": {"action": "accept", "content": {"name": "Ada"}}}
KEYS = [Fernet.generate_key().decode()]


def _roundtrip(
    token: str,
    *,
    sealer_keys: list[str] | None = None,
    opener_keys: list[str] | None = None,
    subject: str = "t1:key:1",
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    ttl: int = 60,
) -> Any:
    async def scenario() -> Any:
        batch = CommandBatch(settings.REDIS_URL, timeout_seconds=5)
        codec = RequestStateCodec(opener_keys or KEYS, ttl_seconds=ttl, batch=batch)
        try:
            return await codec.open(token, subject=subject, method=method, params=params or PARAMS)
        finally:
            batch.close()

    return asyncio.run(scenario())


def _seal(keys: list[str] | None = None, ttl: int = 60, **bound: Any) -> str:
    codec = RequestStateCodec(keys or KEYS, ttl_seconds=ttl, batch=None)  # type: ignore[arg-type]
    return codec.seal(
        subject=bound.get("subject", "t1:key:1"),
        method=bound.get("method", "tools/call"),
        params=bound.get("params", PARAMS),
        answers=ANSWERS,
    )


def _refused(token: Any, **checks: Any) -> str:
    with pytest.raises(JsonRpcError) as excinfo:
        _roundtrip(token, **checks)
    assert excinfo.value.code == INVALID_PARAMS
    return excinfo.value.message


def test_a_sealed_state_opens_once_with_its_answers():
    token = _seal()
    assert "Ada" not in token  # encrypted, not just signed: answers may be personal
    assert _roundtrip(token).answers == ANSWERS
    assert "already used" in _refused(token)


def test_the_retry_may_change_only_the_round_params():
    retry = {**PARAMS, "_meta": {"progressToken": 3}, "inputResponses": {"x": {}}, "requestState": "..."}
    assert _roundtrip(_seal(), params=retry).answers == ANSWERS
    assert _refused(_seal(), params={**PARAMS, "arguments": {"room": "B"}}) == request_state.INVALID_STATE


@pytest.mark.parametrize(
    "checks",
    [{"subject": "t1:key:2"}, {"subject": "t2:key:1"}, {"method": "prompts/get"}],
    ids=["other key", "other tenant", "other method"],
)
def test_a_state_is_bound_to_its_caller_and_method(checks):
    assert _refused(_seal(), **checks) == request_state.INVALID_STATE


@pytest.mark.parametrize(
    "token",
    [lambda t: t + "-TAMPERED", lambda t: t[:-4] + "AAAA", lambda t: "not a token", lambda t: 42, lambda t: None],
    ids=["suffix", "altered", "garbage", "number", "null"],
)
def test_altered_or_foreign_states_are_refused(token):
    assert _refused(token(_seal())) == request_state.INVALID_STATE


def test_a_state_from_other_keys_is_refused_and_rotation_keeps_old_states():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    sealed_before_rotation = _seal([old])
    assert _refused(sealed_before_rotation, opener_keys=[new]) == request_state.INVALID_STATE
    assert _roundtrip(sealed_before_rotation, opener_keys=[new, old]).answers == ANSWERS


def test_an_expired_state_is_refused(monkeypatch):
    token = _seal(ttl=1)
    later = request_state.time.time() + 5
    monkeypatch.setattr(request_state.time, "time", lambda: later)
    assert _refused(token, ttl=1) == request_state.INVALID_STATE
