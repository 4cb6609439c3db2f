"""What the resource server fetches from external issuers: their metadata, JWKS and
introspection answers, each cached per process and bounded.

Requests go through the SSRF-guarded outbound client (``tools_app.backends.http.netguard``):
issuer URLs are typed by tenant admins, so they must not reach the platform's own network
unless ``TOOLBAY_OUTBOUND_ALLOWED_HOSTS`` opens it. Bodies are capped, redirects are not
followed, and a key set is fetched again at most every ``TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS``
however many tokens with unknown key ids arrive.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from django.conf import settings
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from oauth.resource.config import IssuerSettings
from tools_app.backends.http.netguard import DestinationBlocked, outbound_client, read_at_most

MAX_DOCUMENT_BYTES = 256 * 1024
MAX_ENTRIES = 1000
MAX_INTROSPECTIONS = 10_000


class FetchFailed(Exception):
    """An issuer's document could not be had; the message says which and why (no secrets)."""


async def fetch_json(
    url: str, *, method: str = "GET", data: dict[str, str] | None = None, auth: tuple[str, str] | None = None
) -> dict[str, Any]:
    timeout = settings.TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS
    try:
        async with asyncio.timeout(timeout):
            headers = {"Accept": "application/json"}
            if auth is not None:  # RFC 6749 §2.3.1: form-encoded, then Basic
                pair = f"{quote(auth[0], safe='')}:{quote(auth[1], safe='')}".encode()
                headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
            request = outbound_client().build_request(method, url, data=data, headers=headers, timeout=timeout)
            response = await outbound_client().send(request, stream=True)
            try:
                body = await read_at_most(response, MAX_DOCUMENT_BYTES)
            finally:
                await response.aclose()
            if body is None:
                raise FetchFailed(f"{url}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
    except (httpx.HTTPError, DestinationBlocked, TimeoutError, OSError) as exc:
        raise FetchFailed(f"{url}: {exc or type(exc).__name__}") from None
    if response.status_code != 200:
        raise FetchFailed(f"{url} answered HTTP {response.status_code}")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise FetchFailed(f"{url} did not answer JSON") from None
    if not isinstance(document, dict):
        raise FetchFailed(f"{url} did not answer a JSON object")
    return document


def metadata_urls(issuer: str) -> list[str]:
    """OpenID Connect discovery first (Keycloak, Auth0, Entra ID), then RFC 8414."""
    from urllib.parse import urlsplit

    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    return [
        f"{origin}{path}/.well-known/openid-configuration",
        f"{origin}/.well-known/oauth-authorization-server{path}",
    ]


@dataclass
class _Entry:
    keys: KeySet | None
    kids: frozenset[str]
    fetched_at: float
    introspection_endpoint: str


class IssuerDirectory:
    """Per process: each issuer's key set and endpoints, fetched on demand."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._introspected: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def clear(self) -> None:
        self._entries.clear()
        self._introspected.clear()

    @staticmethod
    def _cache_key(issuer: IssuerSettings) -> str:
        return f"{issuer.issuer}\0{issuer.jwks_uri}\0{issuer.introspection_endpoint}\0{issuer.discovery}"

    async def _endpoints(self, issuer: IssuerSettings) -> tuple[str, str]:
        jwks_uri, introspection = issuer.jwks_uri, issuer.introspection_endpoint
        needs_jwks = issuer.validation == "jwt" and not jwks_uri
        needs_introspection = issuer.validation == "introspection" and not introspection
        if (needs_jwks or needs_introspection) and issuer.discovery:
            problems = []
            for url in metadata_urls(issuer.issuer):
                try:
                    document = await fetch_json(url)
                except FetchFailed as exc:
                    problems.append(str(exc))
                    continue
                if document.get("issuer") != issuer.issuer:
                    problems.append(f"{url} names issuer {document.get('issuer')!r}, not {issuer.issuer!r}")
                    continue
                jwks_uri = jwks_uri or str(document.get("jwks_uri") or "")
                introspection = introspection or str(document.get("introspection_endpoint") or "")
                break
            else:
                raise FetchFailed("issuer metadata could not be read: " + "; ".join(problems))
        return jwks_uri, introspection

    async def key_set(self, issuer: IssuerSettings, kid: str | None) -> KeySet:
        """The issuer's keys; fetched again when stale, or when ``kid`` is unknown (bounded)."""
        cache_key = self._cache_key(issuer)
        entry = self._entries.get(cache_key)
        if entry is not None and self._fresh_enough(entry, kid):
            assert entry.keys is not None
            return entry.keys
        lock = self._locks.setdefault(cache_key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(cache_key)
            if entry is not None and self._fresh_enough(entry, kid):
                assert entry.keys is not None
                return entry.keys
            jwks_uri, introspection = await self._endpoints(issuer)
            if not jwks_uri:
                raise FetchFailed(f"no jwks_uri for issuer {issuer.issuer}")
            document = await fetch_json(jwks_uri)
            try:
                keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
            except (JoseError, ValueError, TypeError, KeyError) as exc:
                raise FetchFailed(f"{jwks_uri} is not a usable JWKS: {exc}") from None
            kids = frozenset(str(key.kid) for key in keys if key.kid)
            self._entries[cache_key] = _Entry(keys, kids, time.monotonic(), introspection)
            self._entries.move_to_end(cache_key)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
            return keys

    @staticmethod
    def _fresh_enough(entry: _Entry, kid: str | None) -> bool:
        age = time.monotonic() - entry.fetched_at
        if age >= settings.TOOLBAY_OAUTH_JWKS_CACHE_SECONDS or entry.keys is None:
            return False
        if kid is None or kid in entry.kids:
            return True
        # An unknown key id: the issuer may have rotated. Fetch again, but not more often than this.
        return age < settings.TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS

    async def introspect(self, issuer: IssuerSettings, token: str) -> dict[str, Any]:
        """The RFC 7662 answer for ``token`` (active or not), cached briefly."""
        digest = hashlib.sha256(f"{issuer.issuer}\0{token}".encode()).hexdigest()
        now = time.time()
        cached = self._introspected.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        _, endpoint = await self._endpoints(issuer)
        if not endpoint:
            raise FetchFailed(f"no introspection endpoint for issuer {issuer.issuer}")
        auth = (issuer.client_id, issuer.client_secret) if issuer.client_id else None
        answer = await fetch_json(
            endpoint, method="POST", data={"token": token, "token_type_hint": "access_token"}, auth=auth
        )
        until = now + settings.TOOLBAY_OAUTH_INTROSPECTION_CACHE_SECONDS
        exp = answer.get("exp")
        if isinstance(exp, int | float):
            until = min(until, float(exp))
        if until > now:
            self._introspected[digest] = (until, answer)
            while len(self._introspected) > MAX_INTROSPECTIONS:
                self._introspected.popitem(last=False)
        return answer


issuer_directory = IssuerDirectory()
