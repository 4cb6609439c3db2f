"""ASGI entry point: MCP endpoints go to the Channels consumer, everything else to Django."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from mcp_platform.consumers import McpConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                # No Django middleware here: no CSRF, no APPEND_SLASH redirect, no session lookup.
                re_path(r"^mcp/(?P<tenant>[A-Za-z0-9_-]+)/?$", McpConsumer.as_asgi()),
                # URLRouter routes to ASGI apps; django-stubs types re_path for Django views only.
                re_path(r"", django_asgi_app),  # type: ignore[arg-type]
            ]
        ),
    }
)
