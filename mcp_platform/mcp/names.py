"""Every Redis key, stream id and channel-layer group name the MCP engine uses, built in one place."""

from __future__ import annotations

PREFIX = "toolbay:mcp"

# The stream id of a session's standalone GET stream (POST streams get random ids).
STANDALONE_STREAM = "get"


def session_key(session_id: str) -> str:
    return f"{PREFIX}:session:{session_id}"


def events_key(session_id: str, stream_id: str) -> str:
    return f"{PREFIX}:ev:{session_id}:{stream_id}"


def pending_request_key(session_id: str, request_id: str) -> str:
    """Where the channel waiting for the client's answer to a server request is registered."""
    return f"{PREFIX}:pending:{session_id}:{request_id}"


def inflight_key(session_id: str, request_key: str) -> str:
    """Where the channel of a running client request is registered (for cancellation)."""
    return f"{PREFIX}:inflight:{session_id}:{request_key}"


def cancelled_key(session_id: str, request_key: str) -> str:
    """A cancellation that arrived before its call registered itself."""
    return f"{PREFIX}:cancelled:{session_id}:{request_key}"


def standalone_lock_key(session_id: str) -> str:
    return f"{PREFIX}:getstream:{session_id}"


def run_channel_key(run_id: str) -> str:
    """Where the channel of the worker currently executing a run is registered."""
    return f"{PREFIX}:run-channel:{run_id}"


def run_done_key(run_id: str) -> str:
    """A one-entry stream written when a run reaches a terminal state (wakes tasks/result)."""
    return f"{PREFIX}:run-done:{run_id}"


CATALOG_ALL_GROUP = "mcp.catalog.all"


def tenant_group(tenant_id: int) -> str:
    """Channel-layer group of the stream hubs (one per ASGI process) holding a tenant's streams."""
    return f"mcp.tenant.{tenant_id}"


def tenant_sessions_key(tenant_id: int) -> str:
    """Sorted set of a tenant's session ids, scored by last-seen time (the live sessions view)."""
    return f"{PREFIX}:tenant-sessions:{tenant_id}"


def session_digest_key(session_id: str) -> str:
    """The visible-tools fingerprint the session was last told about (see standalone.py)."""
    return f"{PREFIX}:digest:{session_id}"


def request_state_key(nonce: str) -> str:
    """Marks a multi-round requestState as used (see request_state.py)."""
    return f"{PREFIX}:request-state:{nonce}"


def subscriptions_key(session_id: str) -> str:
    """Set of the resource URIs a session subscribed to (resources/subscribe)."""
    return f"{PREFIX}:subs:{session_id}"


def process_alive_key(process_id: str) -> str:
    """Present while the process (ASGI server or worker) of that id beats (see liveness.py)."""
    return f"{PREFIX}:alive:{process_id}"


def stream_producer_key(session_id: str, stream_id: str) -> str:
    """Who produces a resumable stream's events: a process, or a run on a worker."""
    return f"{PREFIX}:producer:{session_id}:{stream_id}"
