"""Where things are: a tenant's canonical MCP URL (the resource, the audience of its tokens),
its Protected Resource Metadata, and the embedded authorization server's issuer and endpoints.

All are built from an origin (``scheme://host[:port]``): ``TOOLBAY_PUBLIC_URL`` when set,
else the one the request came to. Canonical per RFC 8707 and the MCP spec: lowercase scheme
and host, no trailing slash, no fragment.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest

PRM_PREFIX = "/.well-known/oauth-protected-resource"


def canonical_origin(origin: str) -> str:
    """``TOOLBAY_PUBLIC_URL`` if set, else ``origin`` with a lowercase scheme and host."""
    if settings.TOOLBAY_PUBLIC_URL:
        origin = settings.TOOLBAY_PUBLIC_URL
    parts = urlsplit(origin)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def request_origin(request: HttpRequest) -> str:
    """The origin a Django request came to (``ALLOWED_HOSTS`` already vetted its host)."""
    scheme = request.scheme or "http"
    host = request.get_host()
    if settings.MCP_TRUST_FORWARDED_HOST:
        host = request.headers.get("X-Forwarded-Host", host).split(",")[0].strip()
        scheme = request.headers.get("X-Forwarded-Proto", scheme).split(",")[0].strip()
    return canonical_origin(f"{scheme}://{host}")


def resource_url(origin: str, slug: str) -> str:
    return f"{canonical_origin(origin)}/mcp/{slug}"


def resource_metadata_url(origin: str, slug: str) -> str:
    return f"{canonical_origin(origin)}{PRM_PREFIX}/mcp/{slug}"


def issuer_url(origin: str, slug: str) -> str:
    """The embedded authorization server's issuer for this tenant."""
    return f"{canonical_origin(origin)}/oauth/{slug}"
