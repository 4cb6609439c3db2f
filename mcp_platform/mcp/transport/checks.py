"""HTTP details of Streamable HTTP: headers, media types, Host and Origin checks."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from urllib.parse import urlsplit

JSON = "application/json"
SSE = "text/event-stream"


def header_map(raw_headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-cased header names to values (repeated headers joined with a comma)."""
    headers: dict[str, str] = {}
    for name, value in raw_headers:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    ranges = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if not media:
            continue
        quality = 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        ranges.append((media, quality))
    return ranges


# Clients send the same few header values again and again: the answers are memoized (bounded).
@functools.lru_cache(maxsize=512)
def accepts(accept: str | None, media_type: str) -> bool:
    """Whether an Accept header admits ``media_type`` (wildcards and q=0 honoured)."""
    if not accept:
        return False
    main = media_type.split("/", 1)[0]
    best = None
    for media, quality in _media_ranges(accept):
        if media in (media_type, f"{main}/*", "*/*"):
            specificity = 2 if media == media_type else (1 if media.endswith("/*") and media != "*/*" else 0)
            if best is None or specificity > best[0]:
                best = (specificity, quality)
    return best is not None and best[1] > 0


def is_json_content_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == JSON


def host_name(host_header: str) -> str:
    """The host part of a Host header, without port; IPv6 keeps its brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.rsplit(":", 1)[0] if ":" in host else host


@functools.lru_cache(maxsize=512)
def host_allowed(host_header: str | None, allowed_hosts: tuple[str, ...]) -> bool:
    """Port-agnostic Host allow-list; ``*`` admits any host, ``.example.com`` subdomains."""
    if not host_header:
        return False
    host = host_name(host_header)
    for pattern in allowed_hosts:
        pattern = pattern.lower()
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith(".") and (host.endswith(pattern) or host == pattern[1:]):
            return True
    return False


def origin_allowed(origin: str | None, allowed_origins: Iterable[str], allowed_hosts: tuple[str, ...]) -> bool:
    """No Origin (non-browser clients) is fine; otherwise it must be listed, or name an allowed host."""
    if origin is None:
        return True
    origin = origin.strip().lower()
    allowed = {o.lower().rstrip("/") for o in allowed_origins}
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    hostname = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host_allowed(hostname, allowed_hosts)
