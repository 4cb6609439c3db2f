"""Toolbay as an OAuth 2.0 client of a connection provider: discovery, the authorization
request (code flow, PKCE S256, ``state``), the code exchange, refresh and revocation.

Authlib's ``AsyncOAuth2Client`` speaks the protocol, made by ``tools_app.backends.http.oauth2``
(shared with the http backend's client-credentials auth): its HTTP goes through the backends'
SSRF-guarded transport, and errors become ``ProviderError`` with the OAuth error code only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oauth2.rfc6749.errors import OAuth2Error
from django.conf import settings

from oauth.models import ConnectionProvider
from oauth.resource.remote import FetchFailed, fetch_json
from tools_app.backends.http.oauth2 import TRANSPORT_ERRORS, oauth_client, token_call
from tools_app.backends.http.oauth2 import ProviderError as ProviderError


@dataclass(frozen=True)
class Endpoints:
    authorization: str
    token: str
    revocation: str = ""
    userinfo: str = ""


# Discovery answers per issuer, per process, for TOOLBAY_OAUTH_JWKS_CACHE_SECONDS.
_discovered: dict[str, tuple[float, dict[str, Any]]] = {}


async def discover(issuer: str) -> dict[str, Any]:
    """The issuer's metadata: OpenID Connect Discovery, then RFC 8414 (path inserted after the
    host); the document must name the same issuer."""
    cached = _discovered.get(issuer)
    if cached is not None and time.monotonic() - cached[0] < settings.TOOLBAY_OAUTH_JWKS_CACHE_SECONDS:
        return cached[1]
    base = issuer.rstrip("/")
    split = httpx.URL(base)
    candidates = [
        base + "/.well-known/openid-configuration",
        str(split.copy_with(path="/.well-known/oauth-authorization-server" + (split.path.rstrip("/")))),
    ]
    problems = []
    for url in candidates:
        try:
            document = await fetch_json(url)
        except FetchFailed as exc:
            problems.append(str(exc))
            continue
        if document.get("issuer") not in (issuer, base):
            raise ProviderError(f"the metadata at {url} names another issuer")
        _discovered[issuer] = (time.monotonic(), document)
        return document
    raise ProviderError("no metadata found: " + "; ".join(problems))


async def endpoints(provider: ConnectionProvider) -> Endpoints:
    """The provider's endpoints: those configured, the rest from discovery."""
    configured = {
        "authorization_endpoint": provider.authorization_endpoint,
        "token_endpoint": provider.token_endpoint,
        "revocation_endpoint": provider.revocation_endpoint,
        "userinfo_endpoint": provider.userinfo_endpoint,
    }
    if provider.issuer and not all(configured[k] for k in ("authorization_endpoint", "token_endpoint")):
        document = await discover(provider.issuer)
        for key, value in configured.items():
            if not value and isinstance(document.get(key), str):
                configured[key] = document[key]
    if not configured["authorization_endpoint"] or not configured["token_endpoint"]:
        raise ProviderError("the provider has no authorization or token endpoint (give an issuer or both endpoints)")
    return Endpoints(
        configured["authorization_endpoint"],
        configured["token_endpoint"],
        configured["revocation_endpoint"],
        configured["userinfo_endpoint"],
    )


def _client(provider: ConnectionProvider, client_secret: str, **options: Any) -> AsyncOAuth2Client:
    return oauth_client(
        client_id=provider.client_id,
        client_secret=client_secret,
        token_endpoint_auth_method=provider.token_endpoint_auth_method,
        code_challenge_method="S256" if provider.pkce else None,
        **options,
    )


async def authorization_url(
    provider: ConnectionProvider, *, redirect_uri: str, state: str, code_verifier: str, scopes: list[str]
) -> str:
    where = await endpoints(provider)
    extra = {str(k): str(v) for k, v in (provider.extra_authorize_params or {}).items()}
    async with _client(provider, "", redirect_uri=redirect_uri, scope=" ".join(scopes)) as client:
        url, _state = client.create_authorization_url(
            where.authorization, state=state, code_verifier=code_verifier if provider.pkce else None, **extra
        )
    return str(url)


async def exchange_code(
    provider: ConnectionProvider, client_secret: str, *, code: str, redirect_uri: str, code_verifier: str
) -> dict[str, Any]:
    where = await endpoints(provider)
    async with _client(provider, client_secret, redirect_uri=redirect_uri) as client:
        options = {"code_verifier": code_verifier} if provider.pkce else {}
        return await token_call(client.fetch_token(where.token, grant_type="authorization_code", code=code, **options))


async def refresh(provider: ConnectionProvider, client_secret: str, *, refresh_token: str) -> dict[str, Any]:
    where = await endpoints(provider)
    async with _client(provider, client_secret) as client:
        return await token_call(client.refresh_token(where.token, refresh_token=refresh_token))


async def revoke(provider: ConnectionProvider, client_secret: str, *, token: str, hint: str) -> bool:
    """RFC 7009; False when the provider has no revocation endpoint or refused."""
    where = await endpoints(provider)
    if not where.revocation:
        return False
    async with _client(provider, client_secret) as client:
        try:
            response = await client.revoke_token(where.revocation, token=token, token_type_hint=hint)
        except (OAuth2Error, OAuthError, *TRANSPORT_ERRORS):
            return False
    return bool(response.status_code == 200)


async def userinfo(provider: ConnectionProvider, access_token: str) -> dict[str, Any]:
    """The provider's userinfo for the token ({} when it has no userinfo endpoint)."""
    where = await endpoints(provider)
    if not where.userinfo:
        return {}
    async with _client(provider, "") as client:
        try:
            response = await client.request(
                "GET", where.userinfo, headers={"Authorization": f"Bearer {access_token}"}, withhold_token=True
            )
            value = response.json() if response.status_code == 200 else {}
        except (*TRANSPORT_ERRORS, ValueError):
            return {}
    return value if isinstance(value, dict) else {}


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


async def exchange_token(
    provider: ConnectionProvider, client_secret: str, *, subject_token: str, audience: str, scopes: list[str]
) -> dict[str, Any]:
    """RFC 8693 token exchange at the provider's token endpoint: a token for ``audience``
    acting as the subject of ``subject_token`` (the caller's own access token from that
    provider). Authlib sends it as an ordinary token request with the exchange's parameters
    and authenticates Toolbay the way the provider is configured to."""
    where = await endpoints(provider)
    options: dict[str, str] = {
        "subject_token": subject_token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
        "audience": audience,
    }
    if scopes:
        options["scope"] = " ".join(scopes)
    async with _client(provider, client_secret) as client:
        return await token_call(client.fetch_token(where.token, grant_type=TOKEN_EXCHANGE, **options))
