"""Secrets of the OAuth app at rest: sealed like backend secrets (``TOOLBAY_SECRET_KEYS``)."""

from __future__ import annotations

from tools_app.backends.vault import SecretUnavailable, seal, unseal

__all__ = ["SecretUnavailable", "seal", "unseal"]
