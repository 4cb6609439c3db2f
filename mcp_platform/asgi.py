"""ASGI entry point: ``/mcp/<tenant>`` goes straight to the MCP endpoint, everything else to Django;
the lifespan starts the graceful stop (``mcp_platform.lifespan``).

The MCP path gets no Django middleware (no CSRF, no APPEND_SLASH redirect, no session
lookup) and no per-request routing objects: one compiled pattern decides. There is no
protocol router either: only HTTP is served (Channels is the layer between processes), and
every frame on the way stays alive for as long as an open stream does (so ``route`` is a
plain function that hands back the coroutine to await, not a frame of its own). In front of both,
``mcp_platform.edge`` times out slow bodies and caps requests per client address.
"""

import gc
import os
import re
from collections.abc import Awaitable

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
django_asgi_app = get_asgi_application()

from mcp_platform.edge import EdgeGuard, Receive, Scope, Send  # noqa: E402
from mcp_platform.endpoint import drain, mcp_endpoint, stopped  # noqa: E402
from mcp_platform.lifespan import lifespan  # noqa: E402

MCP_PATH = re.compile(r"^/mcp/([A-Za-z0-9_-]+)/?$")


def route(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
    if scope["type"] == "lifespan":
        return lifespan(receive, send, drain=drain, stopped=stopped)
    match = MCP_PATH.match(scope["path"]) if scope["type"] == "http" else None
    if match is not None:
        return mcp_endpoint(scope, receive, send, tenant=match.group(1))
    return django_asgi_app(scope, receive, send)  # Django refuses what is not HTTP


application = EdgeGuard(
    route,
    body_timeout_seconds=settings.TOOLBAY_BODY_READ_TIMEOUT_SECONDS,
    max_per_client=settings.TOOLBAY_MAX_CONNECTIONS_PER_CLIENT,
)


# The cyclic garbage collector's full passes scan every live object, and a server holding
# thousands of sessions holds hundreds of thousands (their tasks, frames and buffers): with
# Python's defaults (700, 10, 10) they were a third of the CPU per request at 2,000 sessions
# (scale_bench: 416 -> 274 µs per request with TOOLBAY_GC_THRESHOLDS' default). What the
# process loaded to start is frozen (never scanned again); the thresholds are a setting.
gc.freeze()
gc.set_threshold(*settings.TOOLBAY_GC_THRESHOLDS)
