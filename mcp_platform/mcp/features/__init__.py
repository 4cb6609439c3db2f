"""Server features beyond tools, as era-agnostic handlers: resources, prompts, completion.

Each handler takes the host, the caller's identity and the request's params (plus what its
method needs: a pager, a subscription set, the requester) and returns the result dict, or
raises ``JsonRpcError``. Nothing here knows the transport or the protocol revision: both
engines register them through their shared base (``mcp_platform.mcp.spine``), which
declares ``CAPABILITIES``, and each revision shapes the results in its own envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What initialize declares for these features (notes §3.1).
CAPABILITIES: dict[str, Any] = {
    "resources": {"subscribe": True, "listChanged": True},
    "prompts": {"listChanged": True},
    "completions": {},
}

# The notification that tells a client a list changed, per list name of ToolHost.visible_digests.
LIST_CHANGED = {
    "tools": "notifications/tools/list_changed",
    "resources": "notifications/resources/list_changed",
    "prompts": "notifications/prompts/list_changed",
}
RESOURCE_UPDATED = "notifications/resources/updated"


def encode_digests(digests: Mapping[str, str]) -> str:
    """The fingerprints of a caller's lists as one string (kept per session in Redis)."""
    return ";".join(f"{name}={digests[name]}" for name in sorted(digests))


def changed_lists(previous: str | None, current: Mapping[str, str]) -> list[str]:
    """The list_changed notifications due between two fingerprints (``encode_digests``, or
    the bare tools fingerprint sessions stored before resources and prompts existed).
    Nothing is due without a previous fingerprint: the client has just listed everything."""
    if previous is None:
        return []
    if "=" not in previous:
        before = {"tools": previous}
    else:
        before = dict(part.split("=", 1) for part in previous.split(";") if "=" in part)
    return [
        LIST_CHANGED[name]
        for name in sorted(current)
        if name in LIST_CHANGED and name in before and before[name] != current[name]
    ]
