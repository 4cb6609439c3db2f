"""Opaque, tamper-proof pagination cursors."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json


class CursorCodec:
    """Cursors carry an offset, signed and bound to a scope (method + credential)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sign(self, payload: bytes, scope: str) -> str:
        mac = hmac.new(self._secret, scope.encode() + b"\0" + payload, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def encode(self, offset: int, *, scope: str) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"o": offset}).encode()).rstrip(b"=")
        return f"{payload.decode()}.{self._sign(payload, scope)}"

    def decode(self, cursor: object, *, scope: str) -> int:
        """The offset in a cursor we issued for ``scope``; ValueError for anything else."""
        if not isinstance(cursor, str) or "." not in cursor or len(cursor) > 512:
            raise ValueError("malformed cursor")
        payload, signature = cursor.rsplit(".", 1)
        if not hmac.compare_digest(signature, self._sign(payload.encode(), scope)):
            raise ValueError("cursor signature mismatch")
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        offset = data.get("o") if isinstance(data, dict) else None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError("cursor offset invalid")
        return offset
