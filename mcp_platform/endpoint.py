"""``/mcp/<tenant>``: the MCP engine, wired to the platform (its ToolHost, stores, settings).

One transport per event loop (Redis connections belong to a loop). The endpoint is plain
ASGI, routed by ``mcp_platform.asgi`` without a Channels consumer per request: a consumer's
loop would create a channel-layer channel and close stale database connections (a thread
hop) for every request, and the hot path needs neither. The Channels layer carries what
crosses processes (cancellations, answers to server requests, change wake-ups), received
by whoever needs it (``mcp_platform.mcp.links``, ``mcp_platform.mcp.transport.hub``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from functools import lru_cache

from channels.layers import get_channel_layer
from django.conf import settings

from mcp_platform import tracing
from mcp_platform.edge import Receive, Scope, Send
from mcp_platform.faults import is_unavailable
from mcp_platform.logs import enter_mcp_log_context, leave_log_context
from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.engine import Engine, EngineConfig
from mcp_platform.mcp.events import EventStore, parse_event_id
from mcp_platform.mcp.limits import InputLimits
from mcp_platform.mcp.liveness import Liveness
from mcp_platform.mcp.request_state import RequestStateCodec
from mcp_platform.mcp.sessions import SessionStore
from mcp_platform.mcp.stateless import StatelessConfig, StatelessEngine
from mcp_platform.mcp.transport.http import StreamableHttp, TransportConfig
from mcp_platform.redis_clients import async_redis, command_batch
from tenants.auth import tenant_directory
from tools_app.catalog.cache import catalog_cache
from tools_app.runs.host import PlatformToolHost

SERVER_NAME = "toolbay"
SERVER_VERSION = "0.1.0"


def request_state_codec() -> RequestStateCodec:
    """Seals multi-round requestState with keys every process shares (the Fernet keys)."""
    return RequestStateCodec(
        settings.TOOLBAY_SECRET_KEYS, ttl_seconds=settings.MCP_REQUEST_STATE_TTL_SECONDS, batch=command_batch()
    )


def build_transport() -> StreamableHttp:
    redis = async_redis()
    events = EventStore(redis, command_batch(), ttl_seconds=settings.MCP_EVENT_TTL_SECONDS)
    engine = Engine(
        host=PlatformToolHost(tenant_directory, catalog_cache),
        sessions=SessionStore(redis, command_batch(), idle_seconds=settings.MCP_SESSION_IDLE_SECONDS),
        redis=redis,
        batch=command_batch(),
        layer=get_channel_layer(),
        cursors=CursorCodec(settings.SECRET_KEY.encode()),
        config=EngineConfig(
            server_name=SERVER_NAME,
            server_version=SERVER_VERSION,
            page_size=settings.MCP_PAGE_SIZE,
            client_request_timeout=settings.MCP_CLIENT_REQUEST_TIMEOUT_SECONDS,
            cancel_grace=settings.MCP_CANCEL_GRACE_SECONDS,
            is_unavailable=is_unavailable,
        ),
    )
    stateless = StatelessEngine(
        host=engine.host,
        cursors=engine.cursors,
        request_states=request_state_codec(),
        config=StatelessConfig(
            server_name=SERVER_NAME,
            server_version=SERVER_VERSION,
            page_size=settings.MCP_PAGE_SIZE,
            cancel_grace=settings.MCP_CANCEL_GRACE_SECONDS,
            cache_ttl_ms=settings.MCP_CACHE_TTL_MS,
            is_unavailable=is_unavailable,
        ),
    )
    if tracing.ENABLED:
        engine.tracer = stateless.tracer = tracing.start_request
    return StreamableHttp(
        engine,
        stateless,
        events,
        TransportConfig(
            allowed_hosts=tuple(settings.ALLOWED_HOSTS),
            allowed_origins=tuple(settings.MCP_ALLOWED_ORIGINS),
            trust_forwarded_host=settings.MCP_TRUST_FORWARDED_HOST,
            max_body_bytes=settings.MCP_MAX_BODY_BYTES,
            keepalive_seconds=settings.MCP_SSE_KEEPALIVE_SECONDS,
            limits=InputLimits(
                max_depth=settings.MCP_MAX_JSON_DEPTH,
                max_string_chars=settings.MCP_MAX_STRING_CHARS,
                max_batch_requests=settings.MCP_MAX_BATCH_REQUESTS,
                batch_concurrency=settings.MCP_BATCH_CONCURRENCY,
                session_max_in_flight=settings.MCP_SESSION_MAX_IN_FLIGHT,
            ),
            is_unavailable=is_unavailable,
            retry_after_seconds=settings.TOOLBAY_RETRY_AFTER_SECONDS,
            enter_context=enter_mcp_log_context,
            leave_context=leave_log_context,
        ),
        Liveness(command_batch(), interval=settings.TOOLBAY_HEARTBEAT_SECONDS),
    )


_built: weakref.WeakSet[StreamableHttp] = weakref.WeakSet()


@lru_cache(maxsize=8)
def _transport_for(loop: asyncio.AbstractEventLoop) -> StreamableHttp:
    # Redis clients belong to an event loop, so the transport does too.
    transport = build_transport()
    _built.add(transport)
    return transport


def streams_held() -> int:
    """Standalone GET streams this process holds now (the /metrics gauge); builds nothing."""
    return sum(transport.hub().held() for transport in list(_built))


async def drain() -> None:
    """The process is stopping: end its resumable streams with a retry hint (see
    ``mcp_platform.mcp.transport.drain``)."""
    for transport in list(_built):
        await transport.drain.drain()


async def stopped() -> None:
    """Every request has ended: stop beating, so what this process left unfinished (calls
    cut off by the server's graceful-shutdown timeout) is known dead at once."""
    for transport in list(_built):
        await transport.watch.liveness.stop()


def mcp_endpoint(scope: Scope, receive: Receive, send: Send, *, tenant: str) -> Awaitable[None]:
    """``/mcp/<tenant>``: the MCP transport (which enters the request's log context), with
    its trace context when tracing is on. A plain function handing back the transport's
    coroutine: an open stream keeps no frame of its own here."""
    transport = _transport_for(asyncio.get_running_loop())
    if tracing.ENABLED:
        return _traced(transport, scope, receive, send, tenant)
    return transport(scope, receive, send, endpoint=tenant)


async def _traced(transport: StreamableHttp, scope: Scope, receive: Receive, send: Send, tenant: str) -> None:
    """The request with tracing on: its headers' trace context, and a span for a GET that
    resumes a stream (linked to the call that stream carries, wherever that ran)."""
    request = tracing.enter_request(scope, tenant)
    try:
        last_event_id = next((value for name, value in scope["headers"] if name == b"last-event-id"), b"")
        resumed = parse_event_id(last_event_id.decode("latin-1")) if scope["method"] == "GET" else None
        if resumed is None or not request.session_id:
            await transport(scope, receive, send, endpoint=tenant)
            return
        origin = await command_batch().one("GET", tracing.stream_key(request.session_id, resumed[0]))
        with tracing.resume_span(request, origin):
            await transport(scope, receive, send, endpoint=tenant)
    finally:
        tracing.leave_request(request)
