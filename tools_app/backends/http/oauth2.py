"""Authlib's OAuth 2.0 client, sending through the backends' SSRF-guarded transport.

Shared by the per-user connections (``oauth.connections.client``: code flow, refresh,
revocation, token exchange) and the http backend's client-credentials auth: a token endpoint
is configured by a tenant admin (or read from an API description), so its URL is trusted no
more than a tool's. Errors become ``ProviderError`` with the OAuth error code only: a
provider's error description may echo what it was sent.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import httpx
import httpx2
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oauth2.rfc6749.errors import OAuth2Error
from django.conf import settings

from tools_app.backends.http.netguard import DestinationBlocked, outbound_client, read_at_most

# What a provider's answer may weigh (token responses and userinfo are small).
MAX_ANSWER_BYTES = 256 * 1024
# What a failed exchange with a provider can raise besides an OAuth error answer.
TRANSPORT_ERRORS = (httpx.HTTPError, httpx2.HTTPError, DestinationBlocked, OSError)


class ProviderError(Exception):
    """The provider refused or did not answer; ``error`` is the OAuth error code, if any."""

    def __init__(self, message: str, *, error: str = "") -> None:
        super().__init__(message)
        self.error = error


class GuardedTransport(httpx2.AsyncBaseTransport):
    """Authlib's client (built on httpx2) sends through the backends' SSRF-guarded pool."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        timeout = settings.TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS
        outbound = outbound_client()
        sent = outbound.build_request(
            request.method, str(request.url), headers=list(request.headers.raw), content=body, timeout=timeout
        )
        response = await outbound.send(sent, stream=True)
        try:
            content = await read_at_most(response, MAX_ANSWER_BYTES)
        finally:
            await response.aclose()
        if content is None:
            raise ProviderError(f"the provider's answer is larger than {MAX_ANSWER_BYTES} bytes")
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
        return httpx2.Response(response.status_code, headers=headers, content=content)


def oauth_client(
    *, client_id: str, client_secret: str, token_endpoint_auth_method: str, **options: Any
) -> AsyncOAuth2Client:
    """An Authlib client that reaches the provider only through the guarded transport and
    follows no redirect (a token request answered by a redirect is refused, not replayed)."""
    return AsyncOAuth2Client(
        client_id=client_id,
        client_secret=client_secret or None,
        token_endpoint_auth_method=token_endpoint_auth_method,
        timeout=settings.TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS,
        transport=GuardedTransport(),
        trust_env=False,
        follow_redirects=False,
        **options,
    )


async def token_call(call: Awaitable[Any]) -> dict[str, Any]:
    """The token response of an Authlib token request; ProviderError when it failed."""
    try:
        token = await call
    except (OAuth2Error, OAuthError) as exc:
        raise ProviderError(f"the provider refused ({exc.error})", error=str(exc.error or "")) from None
    except TRANSPORT_ERRORS as exc:
        raise ProviderError(f"the provider did not answer ({type(exc).__name__})") from None
    if not isinstance(token, dict) or not isinstance(token.get("access_token"), str):
        raise ProviderError("the provider's token response has no access_token")
    return dict(token)
