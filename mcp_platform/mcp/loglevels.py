"""The MCP log levels (``logging/setLevel``, ``notifications/message``), least severe first."""

from __future__ import annotations

from typing import TypeGuard

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
DEFAULT_LEVEL = "info"
# A 2026-07-28 request that names no logLevel gets no log messages at all.
OFF = "off"


def is_level(value: object) -> TypeGuard[str]:
    return value in LOG_LEVELS


def passes(level: str, threshold: str) -> bool:
    """Whether a message at ``level`` goes out to a client that asked for ``threshold`` and up
    (an unknown threshold counts as the default)."""
    if threshold == OFF:
        return False
    if threshold not in LOG_LEVELS:
        threshold = DEFAULT_LEVEL
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)
