"""Where a run's messages go: the engine's relay, addressed from the run's row."""

from __future__ import annotations

from typing import cast

from channels.layers import get_channel_layer
from django.conf import settings

from mcp_platform.mcp.events import EventStore
from mcp_platform.mcp.jsonrpc import RequestId
from mcp_platform.mcp.relay import CallAddress, Relay
from mcp_platform.redis_clients import async_redis, command_batch
from tools_app.runs.models import ToolRun


def relay() -> Relay:
    """The relay for this event loop (its Redis client belongs to the loop)."""
    redis = async_redis()
    events = EventStore(redis, command_batch(), ttl_seconds=settings.MCP_EVENT_TTL_SECONDS)
    return Relay(redis, get_channel_layer(), events)


def address_of(run: ToolRun) -> CallAddress:
    return CallAddress(
        tenant_id=run.tenant_id,
        session_id=run.session_id,
        stream_id=run.stream_id,
        # The JSON-RPC id the call came with (a JSONField, so 1 and "1" stay apart).
        request_id=cast(RequestId, run.request_id),
        task_id=run.id if run.is_task else None,
    )
