"""API key format, generation and verification.

A raw key is ``tbk_<prefix>_<secret>``. Only the prefix (for lookup) and a SHA-256 of
the whole key are stored. Other credentials (the REST API's personal access tokens,
``tbp_``) use the same format with their own scheme, so one kind can never be mistaken
for the other. The secret has 256 bits of entropy, so a fast hash is enough:
there is nothing to brute-force, and a slow KDF would put milliseconds on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_SCHEME = "tbk"
PREFIX_LENGTH = 12


@dataclass(frozen=True)
class GeneratedKey:
    raw: str
    prefix: str
    hashed: str


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def generate_key(*, scheme: str = KEY_SCHEME) -> GeneratedKey:
    prefix = secrets.token_hex(PREFIX_LENGTH // 2)
    raw = f"{scheme}_{prefix}_{secrets.token_urlsafe(32)}"
    return GeneratedKey(raw=raw, prefix=prefix, hashed=hash_key(raw))


def parse_prefix(raw: str, *, scheme: str = KEY_SCHEME) -> str | None:
    """The lookup prefix of a presented key, or None when it is not shaped like ours."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != scheme or len(parts[1]) != PREFIX_LENGTH or not parts[2]:
        return None
    return parts[1]


def key_matches(raw: str, hashed: str) -> bool:
    """Constant-time comparison of a presented key against a stored hash."""
    return hmac.compare_digest(hash_key(raw), hashed)
