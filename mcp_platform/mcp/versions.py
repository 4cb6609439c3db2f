"""Protocol revisions this endpoint speaks, and how a request's era is recognised."""

from __future__ import annotations

from typing import Any

LATEST = "2025-11-25"
# Handshake-era revisions we serve, newest first.
SUPPORTED = ("2025-11-25", "2025-06-18", "2025-03-26")
# Stateless (2026-07-28 and later) revisions we serve, newest first. Only these are named in
# server/discover and in an unsupported-version error's "supported" list.
MODERN = ("2026-07-28",)
# Every handshake-era revision name; a header outside this set marks a modern (2026+) request.
HANDSHAKE_ERA = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

META = "io.modelcontextprotocol/"
MODERN_META_VERSION_KEY = META + "protocolVersion"
MODERN_META_CAPABILITIES_KEY = META + "clientCapabilities"
MODERN_META_CLIENT_INFO_KEY = META + "clientInfo"
MODERN_META_LOG_LEVEL_KEY = META + "logLevel"
SERVER_INFO_META_KEY = META + "serverInfo"
SUBSCRIPTION_ID_META_KEY = META + "subscriptionId"
TASKS_EXTENSION = META + "tasks"


def negotiate(requested: Any) -> str:
    """Echo a supported requested version, else offer the latest (never reject)."""
    return requested if requested in SUPPORTED else LATEST


def supports_priming(version: str) -> bool:
    """SEP-1699 priming events are only understood by 2025-11-25 clients and later."""
    return version >= "2025-11-25"


def allows_batches(version: str) -> bool:
    return version == "2025-03-26"


def is_modern(header_version: str | None, body: Any) -> bool:
    """A 2026-07-28-style stateless request (by header, or by the _meta claim in the body)."""
    if header_version is not None and header_version not in HANDSHAKE_ERA:
        return True
    if isinstance(body, dict):
        params = body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and MODERN_META_VERSION_KEY in meta:
            return True
    return False
