"""The OpenID Connect client of staff SSO: discovery, the authorization request (code flow
with PKCE S256, ``state`` and ``nonce``), the code exchange, and the ID token checks.

Authlib's OAuth 2 client builds the request and redeems the code; joserfc checks the ID
token: signature against the provider's JWKS (an unknown ``kid`` fetches the JWKS again,
once), then ``iss``, ``aud`` (and ``azp`` when there are several audiences), ``exp``,
``iat``, ``sub`` and ``nonce``. The provider is configured by the platform (environment), so
its URLs are trusted and fetched directly; its metadata and keys are kept per process for
``TOOLBAY_OAUTH_JWKS_CACHE_SECONDS``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.integrations.httpx_client import OAuth2Client
from authlib.oauth2.rfc6749.errors import OAuth2Error
from django.conf import settings
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, InvalidClaimError, InvalidKeyIdError, JoseError, MissingClaimError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry

# Asymmetric algorithms only: "none" and HS* (keyed with the client secret) are never accepted.
ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class SsoError(Exception):
    """Why an SSO sign-in failed, in words for the person signing in."""


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


_lock = threading.Lock()
_metadata: dict[str, tuple[float, ProviderMetadata]] = {}
_keys: dict[str, tuple[float, KeySet]] = {}


def configured() -> bool:
    return bool(settings.TOOLBAY_SSO_ISSUER and settings.TOOLBAY_SSO_CLIENT_ID)


def _get_json(url: str) -> dict[str, Any]:
    try:
        response = httpx.get(url, timeout=settings.TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS, follow_redirects=False)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise SsoError(f"The sign-in provider did not answer ({type(exc).__name__}); try again later.") from None
    if not isinstance(document, dict):
        raise SsoError("The sign-in provider answered with something other than a JSON object.")
    return document


def provider_metadata() -> ProviderMetadata:
    """The provider's discovery document (OpenID Connect Discovery 1.0), checked and cached."""
    issuer: str = settings.TOOLBAY_SSO_ISSUER
    with _lock:
        cached = _metadata.get(issuer)
        if cached is not None and time.monotonic() - cached[0] < settings.TOOLBAY_OAUTH_JWKS_CACHE_SECONDS:
            return cached[1]
    document = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    # Discovery §4.3: the document's issuer must be the one configured, exactly.
    if document.get("issuer") != issuer:
        raise SsoError("The sign-in provider's discovery document names another issuer.")
    try:
        metadata = ProviderMetadata(
            issuer=issuer,
            authorization_endpoint=str(document["authorization_endpoint"]),
            token_endpoint=str(document["token_endpoint"]),
            jwks_uri=str(document["jwks_uri"]),
        )
    except KeyError as exc:
        raise SsoError(f"The sign-in provider's discovery document lacks {exc.args[0]}.") from None
    with _lock:
        _metadata[issuer] = (time.monotonic(), metadata)
    return metadata


def _key_set(metadata: ProviderMetadata, *, refresh: bool) -> KeySet:
    with _lock:
        cached = _keys.get(metadata.jwks_uri)
        fresh = cached is not None and time.monotonic() - cached[0] < settings.TOOLBAY_OAUTH_JWKS_CACHE_SECONDS
        # A refresh (an unknown kid) fetches again at most every JWKS_REFRESH_SECONDS.
        recent = cached is not None and time.monotonic() - cached[0] < settings.TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS
        if cached is not None and fresh and (not refresh or recent):
            return cached[1]
    try:
        keys = KeySet.import_key_set(_get_json(metadata.jwks_uri))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError):
        raise SsoError("The sign-in provider's key set cannot be read.") from None
    with _lock:
        _keys[metadata.jwks_uri] = (time.monotonic(), keys)
    return keys


def _client(redirect_uri: str) -> OAuth2Client:
    return OAuth2Client(
        client_id=settings.TOOLBAY_SSO_CLIENT_ID,
        client_secret=settings.TOOLBAY_SSO_CLIENT_SECRET,
        scope=settings.TOOLBAY_SSO_SCOPES,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        token_endpoint_auth_method="client_secret_basic",
        timeout=settings.TOOLBAY_OAUTH_FETCH_TIMEOUT_SECONDS,
    )


def authorization_url(*, redirect_uri: str, state: str, nonce: str, code_verifier: str) -> str:
    metadata = provider_metadata()
    with _client(redirect_uri) as client:
        url, _state = client.create_authorization_url(
            metadata.authorization_endpoint, state=state, nonce=nonce, code_verifier=code_verifier
        )
    return str(url)


def exchange_code(*, code: str, redirect_uri: str, code_verifier: str) -> str:
    """Redeems the code; returns the ID token (raw)."""
    metadata = provider_metadata()
    try:
        with _client(redirect_uri) as client:
            token = client.fetch_token(
                metadata.token_endpoint, grant_type="authorization_code", code=code, code_verifier=code_verifier
            )
    except OAuth2Error as exc:
        raise SsoError(f"The sign-in provider refused the sign-in ({exc.error}).") from None
    except httpx.HTTPError as exc:
        raise SsoError(f"The sign-in provider did not answer ({type(exc).__name__}); try again later.") from None
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise SsoError("The sign-in provider sent no ID token (is the 'openid' scope configured?).")
    return id_token


def verify_id_token(id_token: str, *, nonce: str) -> dict[str, Any]:
    """The ID token's claims once signature, issuer, audience, expiry and nonce hold."""
    metadata = provider_metadata()
    try:
        try:
            decoded = jwt.decode(id_token, _key_set(metadata, refresh=False), algorithms=list(ID_TOKEN_ALGORITHMS))
        except InvalidKeyIdError:
            decoded = jwt.decode(id_token, _key_set(metadata, refresh=True), algorithms=list(ID_TOKEN_ALGORITHMS))
    except JoseError as exc:
        raise SsoError(f"The ID token's signature does not verify ({type(exc).__name__}).") from None
    claims = dict(decoded.claims)
    client_id: str = settings.TOOLBAY_SSO_CLIENT_ID
    registry = JWTClaimsRegistry(
        leeway=settings.TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS,
        iss={"essential": True, "value": metadata.issuer},
        aud={"essential": True, "value": client_id},
        exp={"essential": True},
        iat={"essential": True},
        sub={"essential": True},
        nonce={"essential": True, "value": nonce},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise SsoError("The ID token has expired.") from None
    except (MissingClaimError, InvalidClaimError) as exc:
        raise SsoError(f"The ID token's claims do not hold ({exc.description or exc}).") from None
    except JoseError as exc:
        raise SsoError(f"The ID token's claims do not hold ({exc}).") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    # OpenID Connect Core §3.1.3.7: with several audiences, azp must be this client.
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise SsoError("The ID token was issued to another client (azp).")
    return claims
