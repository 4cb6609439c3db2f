"""OAuth 2.0 client credentials (RFC 6749 §4.4) for the http backend: the tool's own
identity at an API, from a client ID in its settings and the client secret in the vault.

``{"type": "oauth2_client_credentials", "token_url": URL, "client_id": ID, "secret": NAME,
"scopes": [...], "auth_method": "client_secret_basic" | "client_secret_post",
"audience": A}`` (scopes, auth_method and audience optional).

The token comes from Authlib's client over the SSRF-guarded transport
(``tools_app.backends.http.oauth2``) and is kept sealed in Redis, shared by every process,
until shortly before it expires. A missing token is fetched by one process at a time
(``single_flight``): N calls that find none, on any number of processes, cost one token
request. When the API answers 401 the cached token is dropped (if it is still the one that
was refused) and the call is sent once more with a new one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mcp_platform.redis_clients import async_redis
from tools_app.backends.base import BackendError
from tools_app.backends.http.oauth2 import ProviderError, oauth_client, token_call
from tools_app.backends.single_flight import one_at_a_time
from tools_app.backends.vault import SecretUnavailable, seal, secret_value, unseal

AUTH_METHODS = ("client_secret_basic", "client_secret_post")
# A token is not used from the cache in its last seconds (a call must not start with a token
# that expires on the way), nor for more than half its life when that is shorter.
EXPIRY_MARGIN_SECONDS = 30
# How long a token whose response gave no expires_in is kept: RFC 6749 lets a provider leave
# it out; a 401 drops the token sooner if the provider ended it.
UNKNOWN_LIFETIME_SECONDS = 300


def _digest(tenant_id: int | None, auth: dict[str, Any], client_secret: str) -> str:
    """Names the token: a new client secret (after a leak) or other scopes get another one."""
    parts = [
        str(tenant_id),
        auth["token_url"],
        auth["client_id"],
        client_secret,
        " ".join(sorted(auth.get("scopes", []))),
        auth.get("audience", ""),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _lifetime(token: dict[str, Any]) -> int:
    expires_in = token.get("expires_in")
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or expires_in <= 0:
        return UNKNOWN_LIFETIME_SECONDS
    return int(max(expires_in - EXPIRY_MARGIN_SECONDS, expires_in / 2))


async def _client_secret(tenant_id: int | None, auth: dict[str, Any]) -> str:
    try:
        return await secret_value(tenant_id, auth["secret"])
    except SecretUnavailable as exc:
        raise BackendError(f"cannot authenticate: {exc}") from None


async def _cached(key: str) -> str | None:
    value = await async_redis().get(key)
    if not value:
        return None
    return unseal(value.decode() if isinstance(value, bytes) else value, name="client-credentials token")


async def _fetch(auth: dict[str, Any], client_secret: str) -> dict[str, Any]:
    options: dict[str, str] = {}
    if auth.get("scopes"):
        options["scope"] = " ".join(auth["scopes"])
    if auth.get("audience"):
        options["audience"] = auth["audience"]
    method = auth.get("auth_method", "client_secret_basic")
    async with oauth_client(
        client_id=auth["client_id"], client_secret=client_secret, token_endpoint_auth_method=method
    ) as client:
        try:
            return await token_call(client.fetch_token(auth["token_url"], grant_type="client_credentials", **options))
        except ProviderError as exc:
            # No OAuth error code: the endpoint did not answer, which a retry may fix.
            raise BackendError(
                f"could not get an access token from the token URL: {exc}", retryable=not exc.error
            ) from None


async def access_token(tenant_id: int | None, auth: dict[str, Any]) -> str:
    """The tool's access token: the cached one, else a new one (one fetch across processes)."""
    client_secret = await _client_secret(tenant_id, auth)
    digest = _digest(tenant_id, auth, client_secret)
    key = f"toolbay:client-credentials:{digest}"
    token = await _cached(key)
    if token is not None:
        return token
    async with one_at_a_time(f"client-credentials-fetch:{digest}", busy="an access token is being fetched; try again"):
        token = await _cached(key)  # fetched by whoever held the lock before
        if token is not None:
            return token
        issued = await _fetch(auth, client_secret)
        await async_redis().set(key, seal(issued["access_token"]), ex=_lifetime(issued))
        return str(issued["access_token"])


async def token_rejected(tenant_id: int | None, auth: dict[str, Any], token: str) -> None:
    """The API answered 401 to ``token``: forget it, unless another process already put a
    new one in its place (dropping that would cost one more token request)."""
    client_secret = await _client_secret(tenant_id, auth)
    digest = _digest(tenant_id, auth, client_secret)
    key = f"toolbay:client-credentials:{digest}"
    async with one_at_a_time(f"client-credentials-fetch:{digest}", busy="an access token is being fetched; try again"):
        if await _cached(key) == token:
            await async_redis().delete(key)
