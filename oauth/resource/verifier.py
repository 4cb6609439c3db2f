"""OAuth access tokens on a tenant's MCP endpoint (``tenants.auth.TokenVerifier``).

A token is accepted only when all of this holds (MCP authorization, RFC 9068, RFC 8707):

- it comes from an issuer the tenant trusts: the embedded server's issuer for this tenant
  (``<origin>/oauth/<slug>``) or one of its ``TrustedIssuer`` rows;
- its signature verifies against that issuer's keys with an asymmetric algorithm (never
  ``none``, never an HMAC a public key could be abused for), or the issuer's introspection
  endpoint calls it active;
- it has not expired (``exp`` is required), is not used before ``nbf``, and names this
  tenant's MCP URL (or the issuer's configured audience) in ``aud``: a token for tenant A
  is refused on tenant B;
- for the embedded server, the consent it was issued under still stands.

Warm path: a token seen before (same tenant record, same origin) is answered from a bounded
per-process memo without touching a key; settings come from a snapshot loaded once per
tenant generation; keys from per-process caches. No database query, no network call.
The token itself never leaves this module: principals carry its claims, not the token.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyIdError,
    JoseError,
    MissingClaimError,
    UnsupportedAlgorithmError,
)
from joserfc.jwk import KeySet
from joserfc.jws import extract_compact
from joserfc.jwt import JWTClaimsRegistry

from mcp_platform.single_flight import SingleFlight
from oauth import locations
from oauth.resource.config import OFF, IssuerSettings, OAuthSettings, load_settings
from oauth.resource.remote import FetchFailed, issuer_directory
from oauth.signing import decode_access_token, public_jwks
from tenants.auth import AuthFailure, Challenge, TenantRecord
from tenants.principal import Principal

# Asymmetric algorithms only: "none" and the HMACs (whose "key" would be public) are refused.
EXTERNAL_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
MAX_MEMO = 20_000
MAX_TOKEN_LENGTH = 16_384
# Methods and the scope setting they need.
CALL_METHODS_PREFIX = "tasks/"


class TokenRejected(Exception):
    """Why a token is refused (said to the client in error_description; never the token)."""


def claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by dotted path (``realm_access.roles``)."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _words(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple):
        return frozenset(str(item) for item in value if isinstance(item, str | int))
    return frozenset()


def _validate_claims(claims: dict[str, Any], *, issuer: str, audience: str) -> None:
    registry = JWTClaimsRegistry(
        leeway=settings.TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS,
        iss={"essential": True, "value": issuer},
        aud={"essential": True, "value": audience},
        exp={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise TokenRejected("the token has expired") from None
    except MissingClaimError as exc:
        raise TokenRejected(f"the token lacks the claims {exc.description or exc}") from None
    except InvalidClaimError as exc:
        name = str(exc.description or exc)
        if "aud" in name:
            raise TokenRejected("the token is not meant for this endpoint (audience)") from None
        if "iss" in name:
            raise TokenRejected("the token's issuer is not the expected one") from None
        if "nbf" in name or "iat" in name:
            raise TokenRejected("the token is not valid yet") from None
        raise TokenRejected(f"invalid claim: {name}") from None
    except JoseError as exc:
        raise TokenRejected(f"invalid claims: {exc}") from None


def _decode(verify: Callable[[], jwt.Token]) -> dict[str, Any]:
    """The claims of the token ``verify`` checks the signature of; its failures said plainly."""
    try:
        decoded = verify()
    except UnsupportedAlgorithmError:
        raise TokenRejected("the token's signature algorithm is not accepted") from None
    except BadSignatureError:
        raise TokenRejected("the token's signature does not verify") from None
    except InvalidKeyIdError:
        raise TokenRejected("the token's signing key is not one of the issuer's keys") from None
    except JoseError as exc:
        raise TokenRejected(f"the token cannot be verified ({type(exc).__name__})") from None
    return dict(decoded.claims)


class LocalKeys:
    """The public keys of each tenant's embedded server, read from the database once per
    tenant record (a new key moves the tenant's generation: ``oauth.signals``), and again, at
    most every second, when a token names a key id not seen yet."""

    REFRESH_SECONDS = 1.0
    MAX_TENANTS = 10_000

    def __init__(self) -> None:
        # tenant id -> (the record they were loaded for, keys, their ids, when loaded), oldest first
        self._entries: OrderedDict[int, tuple[TenantRecord, KeySet, frozenset[str], float]] = OrderedDict()
        self._loads: SingleFlight[int, KeySet] = SingleFlight()

    def clear(self) -> None:
        self._entries.clear()

    def _fresh(self, tenant: TenantRecord, kid: str | None) -> KeySet | None:
        entry = self._entries.get(tenant.tenant_id)
        if entry is None or entry[0] is not tenant:
            return None
        if kid in entry[2] or time.monotonic() - entry[3] < self.REFRESH_SECONDS:
            return entry[1]
        return None

    async def key_set(self, tenant: TenantRecord, kid: str | None) -> KeySet:
        while True:
            keys = self._fresh(tenant, kid)
            if keys is not None:
                return keys
            # Concurrent checks share one load; a load joined for another record or an older
            # key set is not enough, and the loop loads again.
            await self._loads.run(tenant.tenant_id, partial(self._load, tenant))

    async def _load(self, tenant: TenantRecord) -> KeySet:
        document = await sync_to_async(public_jwks)(tenant.tenant_id)
        keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        kids = frozenset(str(key["kid"]) for key in document["keys"])
        self._entries.pop(tenant.tenant_id, None)
        self._entries[tenant.tenant_id] = (tenant, keys, kids, time.monotonic())
        while len(self._entries) > self.MAX_TENANTS:  # least recently loaded first, one at a time
            self._entries.popitem(last=False)
        return keys


class OAuthTokenVerifier:
    def __init__(self) -> None:
        self._settings: OrderedDict[int, tuple[TenantRecord, OAuthSettings]] = OrderedDict()
        self._settings_loads: SingleFlight[int, tuple[TenantRecord, OAuthSettings]] = SingleFlight()
        self._memo: OrderedDict[str, tuple[TenantRecord, str, Principal]] = OrderedDict()
        self.local_keys = LocalKeys()

    def clear(self) -> None:
        self._settings.clear()
        self._memo.clear()
        self.local_keys.clear()
        issuer_directory.clear()

    async def settings_for(self, tenant: TenantRecord) -> OAuthSettings:
        """The tenant's OAuth settings as of this tenant record (loaded once per record)."""
        entry = self._settings.get(tenant.tenant_id)
        if entry is not None and entry[0] is tenant:
            return entry[1]
        while True:
            loaded = await self._settings_loads.run(tenant.tenant_id, partial(self._load_settings, tenant))
            if loaded[0] is tenant:
                return loaded[1]
            entry = self._settings.get(tenant.tenant_id)
            if entry is not None and entry[0] is tenant:
                return entry[1]  # a later request loaded it meanwhile

    async def _load_settings(self, tenant: TenantRecord) -> tuple[TenantRecord, OAuthSettings]:
        loaded = (tenant, await sync_to_async(load_settings)(tenant.tenant_id))
        self._settings.pop(tenant.tenant_id, None)
        self._settings[tenant.tenant_id] = loaded
        while len(self._settings) > LocalKeys.MAX_TENANTS:  # least recently loaded first, one at a time
            self._settings.popitem(last=False)
        return loaded

    def _loaded(self, tenant: TenantRecord) -> OAuthSettings:
        entry = self._settings.get(tenant.tenant_id)
        return entry[1] if entry is not None else OFF

    # --- TokenVerifier -------------------------------------------------------------------

    async def challenge(self, tenant: TenantRecord, origin: str) -> Challenge | None:
        config = await self.settings_for(tenant)
        if not config.advertised:
            return None
        return Challenge(
            resource_metadata=locations.resource_metadata_url(origin, tenant.slug), scope=config.list_scope
        )

    async def verify(self, tenant: TenantRecord, token: str, origin: str) -> Principal:
        config = await self.settings_for(tenant)
        if not config.enabled:
            message = "Invalid API key" if tenant.api_keys_enabled else "API keys are turned off for this tenant"
            raise AuthFailure(401, message, tenant.tenant_id)
        digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        memo = self._memo.get(digest)
        if memo is not None and memo[0] is tenant and memo[1] == origin:
            principal = memo[2]
            if principal.expires_at is None or principal.expires_at > time.time():
                return principal
        try:
            principal = await self._check(tenant, config, token, origin)
        except (TokenRejected, FetchFailed) as exc:
            base = await self.challenge(tenant, origin)
            challenge = Challenge(
                resource_metadata=base.resource_metadata if base else "",
                scope=base.scope if base else "",
                error="invalid_token",
                error_description=str(exc)[:300],
            )
            raise AuthFailure(401, f"Invalid access token: {exc}", tenant.tenant_id, challenge=challenge) from None
        self._memo[digest] = (tenant, origin, principal)
        if len(self._memo) > MAX_MEMO:
            self._memo.popitem(last=False)
        return principal

    async def revalidate(self, tenant: TenantRecord, principal: Principal) -> Principal | None:
        config = await self.settings_for(tenant)
        if not config.enabled:
            return None
        if principal.expires_at is not None and principal.expires_at <= time.time():
            return None
        if principal.grant_id:
            return principal if config.embedded and principal.grant_id in config.active_grants else None
        return principal if principal.oauth_issuer in config.issuers else None

    def authorize(self, tenant: TenantRecord, principal: Principal, method: str) -> None:
        config = self._loaded(tenant)
        if method == "tools/list":
            needed = config.list_scope
        elif method == "tools/call" or method.startswith(CALL_METHODS_PREFIX):
            needed = config.call_scope
        else:
            needed = ""
        if not needed or needed in principal.scopes:
            return
        resource = urlsplit(principal.oauth_resource)
        metadata = f"{resource.scheme}://{resource.netloc}{locations.PRM_PREFIX}{resource.path}"
        message = f"Insufficient scope: {method} needs the scope {needed!r}"
        raise AuthFailure(
            403,
            message,
            tenant.tenant_id,
            challenge=Challenge(
                resource_metadata=metadata if principal.oauth_resource else "",
                scope=" ".join(sorted(principal.scopes | {needed})),
                error="insufficient_scope",
                error_description=message,
            ),
        )

    # --- the checks ----------------------------------------------------------------------

    async def _check(self, tenant: TenantRecord, config: OAuthSettings, token: str, origin: str) -> Principal:
        if len(token) > MAX_TOKEN_LENGTH:
            raise TokenRejected("the token is too long")
        resource = locations.resource_url(origin, tenant.slug)
        if token.count(".") == 2:
            try:
                compact = extract_compact(token.encode("ascii"))
                header = compact.headers()
                unverified = orjson.loads(compact.payload)
            except (JoseError, ValueError, UnicodeError, orjson.JSONDecodeError):
                raise TokenRejected("the token is not a well-formed JWT") from None
            if not isinstance(unverified, dict):
                raise TokenRejected("the token is not a well-formed JWT")
            issuer_claim = unverified.get("iss")
            embedded_issuer = locations.issuer_url(origin, tenant.slug)
            if config.embedded and issuer_claim == embedded_issuer:
                return await self._embedded(tenant, config, token, header, embedded_issuer, resource)
            issuer = config.issuers.get(issuer_claim) if isinstance(issuer_claim, str) else None
            if issuer is None:
                raise TokenRejected("the token's issuer is not trusted by this tenant")
            if issuer.validation == "jwt":
                keys = await issuer_directory.key_set(issuer, header.get("kid"))
                claims = _decode(lambda: jwt.decode(token, keys, algorithms=list(EXTERNAL_ALGORITHMS)))
                _validate_claims(claims, issuer=issuer.issuer, audience=issuer.audience or resource)
                return self._principal(tenant, issuer, claims, resource)
            return await self._introspected(tenant, issuer, token, resource)
        # An opaque token: ask the introspecting issuers in turn; the reason given is the last one's.
        rejection = TokenRejected("not a token this tenant accepts")
        for issuer in config.issuers.values():
            if issuer.validation == "introspection":
                try:
                    return await self._introspected(tenant, issuer, token, resource)
                except TokenRejected as exc:
                    rejection = exc
        raise rejection

    async def _embedded(
        self,
        tenant: TenantRecord,
        config: OAuthSettings,
        token: str,
        header: dict[str, Any],
        issuer: str,
        resource: str,
    ) -> Principal:
        if header.get("typ") != "at+jwt":
            raise TokenRejected("the token is not an access token (typ at+jwt)")
        kid = header.get("kid") if isinstance(header.get("kid"), str) else None
        keys = await self.local_keys.key_set(tenant, kid)
        claims = _decode(lambda: decode_access_token(token, keys))
        _validate_claims(claims, issuer=issuer, audience=resource)
        grant_id = claims.get("gid")
        if not isinstance(grant_id, str) or grant_id not in config.active_grants:
            raise TokenRejected("the authorization behind this token was revoked")
        scopes = _words(claims.get("scope"))
        return Principal(
            tenant.tenant_id,
            tenant.slug,
            None,
            "",
            "",
            scopes,
            oauth_subject=str(claims.get("sub") or ""),
            oauth_issuer=issuer,
            oauth_client=str(claims.get("client_id") or ""),
            groups=_words(claims.get("groups")),
            expires_at=float(claims["exp"]),
            grant_id=grant_id,
            oauth_resource=resource,
        )

    async def _introspected(self, tenant: TenantRecord, issuer: IssuerSettings, token: str, resource: str) -> Principal:
        answer = await issuer_directory.introspect(issuer, token)
        if answer.get("active") is not True:
            raise TokenRejected("the issuer says the token is not active")
        if "iss" in answer and answer["iss"] != issuer.issuer:
            raise TokenRejected("the token's issuer is not the expected one")
        exp = answer.get("exp")
        if not isinstance(exp, int | float) or exp + settings.TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS <= time.time():
            raise TokenRejected("the token has expired" if isinstance(exp, int | float) else "the token has no expiry")
        audience = issuer.audience or resource
        if audience not in _words(answer.get("aud")):
            raise TokenRejected("the token is not meant for this endpoint (audience)")
        return self._principal(tenant, issuer, answer, resource)

    @staticmethod
    def _principal(tenant: TenantRecord, issuer: IssuerSettings, claims: dict[str, Any], resource: str) -> Principal:
        subject = claim(claims, issuer.subject_claim)
        if not isinstance(subject, str | int) or subject == "":
            raise TokenRejected(f"the token has no subject ({issuer.subject_claim})")
        client = claims.get("client_id") or claims.get("azp") or claims.get("appid") or ""
        return Principal(
            tenant.tenant_id,
            tenant.slug,
            None,
            "",
            "",
            _words(claim(claims, issuer.scope_claim)),
            oauth_subject=str(subject)[:255],
            oauth_issuer=issuer.issuer,
            oauth_client=str(client)[:255],
            groups=_words(claim(claims, issuer.groups_claim)) if issuer.groups_claim else frozenset(),
            expires_at=float(claims["exp"]),
            oauth_resource=resource,
        )


token_verifier = OAuthTokenVerifier()
