"""``requestState`` of multi-round requests (MRTR, 2026-07-28): sealed, bound, single-use.

When a call needs its client's input, the answer is an ``input_required`` result and the
client retries the same request with the answers. Between the rounds nothing is kept in
any process: what the server needs again — the answers of earlier rounds — travels in
``requestState``, which the client echoes. The client can read and alter it, so it is
sealed with Fernet (authenticated encryption: the answers may hold personal data) under
keys every process shares, and bound to the caller (subject), the method, a hash of the
request's parameters and an expiry. A state is used once: its nonce is recorded in Redis
when a round accepts it, so a replayed state cannot run a call's side effects again.

The keys are derived (HKDF) from the deployment's Fernet keys for this one purpose, the
first key sealing and all of them opening, so rotating those keys rotates these too.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcp_platform.mcp import names
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError
from mcp_platform.redis_batch import CommandBatch

# Parameters a retry may change: the rest must be exactly those of the first round.
ROUND_PARAMS = ("_meta", "inputResponses", "requestState")
INVALID_STATE = "Invalid or expired requestState: repeat the request without it"


def params_digest(params: dict[str, Any]) -> str:
    """What binds a state to its request: the parameters apart from the round's own."""
    stable = {key: value for key, value in params.items() if key not in ROUND_PARAMS}
    return hashlib.sha256(orjson.dumps(stable, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)).hexdigest()


def _canonical(token: str) -> bool:
    """Whether the token is exactly what sealing produced: base64 decoding skips text after
    the padding, so "<token>-TAMPERED" would otherwise open like "<token>"."""
    try:
        return base64.urlsafe_b64encode(base64.urlsafe_b64decode(token.encode())).decode() == token
    except (ValueError, TypeError):
        return False


def _derive(key: str) -> Fernet:
    material = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"toolbay mcp requestState").derive(
        base64.urlsafe_b64decode(key)
    )
    return Fernet(base64.urlsafe_b64encode(material))


@dataclass(frozen=True)
class RoundState:
    """What an accepted ``requestState`` carries: the answers of the earlier rounds."""

    answers: dict[str, Any]


class RequestStateCodec:
    def __init__(self, keys: Sequence[str], *, ttl_seconds: int, batch: CommandBatch) -> None:
        """``keys``: Fernet keys (the first seals); ``ttl_seconds``: how long a state is good."""
        self._fernet = MultiFernet([_derive(key) for key in keys])
        self._ttl = ttl_seconds
        self._batch = batch

    def seal(self, *, subject: str, method: str, params: dict[str, Any], answers: dict[str, Any]) -> str:
        payload = {
            "s": subject,
            "m": method,
            "h": params_digest(params),
            "a": answers,
            "n": secrets.token_urlsafe(12),
            "e": int(time.time()) + self._ttl,
        }
        return self._fernet.encrypt(orjson.dumps(payload)).decode()

    async def open(self, token: Any, *, subject: str, method: str, params: dict[str, Any]) -> RoundState:
        """The state's answers; JsonRpcError(-32602) for a state that is not ours, altered,
        expired, someone else's, for another request, or used before."""
        if not isinstance(token, str) or len(token) > 1_000_000 or not _canonical(token):
            raise JsonRpcError(INVALID_PARAMS, INVALID_STATE)
        try:
            payload = orjson.loads(self._fernet.decrypt(token.encode(), ttl=self._ttl))
        except (InvalidToken, orjson.JSONDecodeError, ValueError):
            raise JsonRpcError(INVALID_PARAMS, INVALID_STATE) from None
        valid = (
            isinstance(payload, dict)
            and payload.get("s") == subject
            and payload.get("m") == method
            and payload.get("h") == params_digest(params)
            and isinstance(payload.get("e"), int)
            and payload["e"] >= time.time()
            and isinstance(payload.get("a"), dict)
            and isinstance(payload.get("n"), str)
        )
        if not valid:
            raise JsonRpcError(INVALID_PARAMS, INVALID_STATE)
        first_use = await self._batch.one("SET", names.request_state_key(payload["n"]), b"1", "NX", "EX", self._ttl)
        if first_use is None:
            raise JsonRpcError(INVALID_PARAMS, "requestState was already used: repeat the request without it")
        return RoundState(answers=payload["a"])
