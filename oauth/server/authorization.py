"""The embedded authorization server of one tenant, on Authlib.

Authlib does the protocol: the authorization code grant with PKCE (S256 only, required),
refresh tokens (rotated on every use), client authentication, RFC 9068 JWT access tokens
(signed with joserfc), RFC 9207 ``iss`` in authorization responses, RFC 7591 registration
and RFC 7009 revocation. This module supplies what Authlib leaves to the application:
storage (codes, consents, refresh tokens, clients), the resource indicator (RFC 8707: the
tenant's MCP URL is the only resource, and the audience of every token) and the claims
Toolbay's resource server reads (``gid``, the consent; ``groups``).

One server object per request: it is bound to the tenant and the origin the request came to
(the issuer is ``<origin>/oauth/<slug>``). Building one costs microseconds.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from authlib.common.encoding import json_dumps
from authlib.common.urls import add_params_to_uri
from authlib.integrations.django_oauth2.requests import DjangoJsonRequest, DjangoOAuth2Request
from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc6749.errors import InvalidGrantError, InvalidRequestError, OAuth2Error
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientMetadataClaims, ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from authlib.oauth2.rfc9207 import IssuerParameter
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from oauth import locations
from oauth.models import AuthorizationCode, Grant, OAuthClient, RefreshToken, TenantOAuth
from oauth.server.clients import ClientMetadataError, RegisteredClient, find_client, hash_secret, register_client
from oauth.signing import ALGORITHM, decode_access_token, public_key_set, signing_key
from tenants.models import Membership, Tenant

log = logging.getLogger(__name__)

TOKEN_AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]
MAX_TOKEN_LENGTH = 16_384


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 §2: the resource is not this tenant's MCP endpoint."""

    error = "invalid_target"


@dataclass
class AuthorizedUser:
    """The resource owner as Authlib sees it: the user, under the consent they gave."""

    user: Any
    grant: Grant
    groups: list[str] = field(default_factory=list)

    def get_user_id(self) -> str:
        return str(self.user.get_username())


def groups_of(user: Any, tenant: Tenant) -> list[str]:
    """What access rules can match a user of the embedded server by: Django groups and role."""
    names = sorted(user.groups.values_list("name", flat=True))
    role = Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()
    return [*names, f"role:{role}"] if role else names


def may_authorize(user: Any, tenant: Tenant) -> bool:
    """Members of the tenant (any role) may let clients act for them there."""
    return bool(user.is_active) and Membership.objects.filter(user=user, tenant=tenant).exists()


def _authorized(grant: Grant) -> AuthorizedUser | None:
    if grant.revoked_at is not None or not may_authorize(grant.user, grant.tenant):
        return None
    return AuthorizedUser(grant.user, grant, groups_of(grant.user, grant.tenant))


@dataclass
class IssuedCode:
    row: AuthorizationCode

    @property
    def code_challenge(self) -> str:
        return self.row.code_challenge

    @property
    def code_challenge_method(self) -> str:
        return self.row.code_challenge_method

    def get_redirect_uri(self) -> str:
        return self.row.redirect_uri

    def get_scope(self) -> str:
        return self.row.scope


@dataclass
class IssuedRefreshToken:
    row: RefreshToken

    def check_client(self, client: RegisteredClient) -> bool:
        return bool(self.row.grant.client.client_id == client.get_client_id())

    def get_scope(self) -> str:
        return self.row.scope

    def get_expires_in(self) -> int:
        return max(0, int((self.row.expires_at - timezone.now()).total_seconds()))

    def is_expired(self) -> bool:
        return self.row.expires_at <= timezone.now()

    def is_revoked(self) -> bool:
        return self.row.revoked_at is not None


class S256Challenge(CodeChallenge):  # type: ignore[misc]
    """PKCE, required, S256 only (OAuth 2.1; MCP authorization)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        payload = grant.request.payload.data
        if not payload.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256")
        if payload.get("code_challenge_method") != "S256":
            raise InvalidRequestError("Unsupported 'code_challenge_method': only S256")
        super().validate_code_challenge(grant, redirect_uri)


def _check_resource(server: TenantAuthorizationServer, request: Any) -> str:
    resources = request.payload.datalist.get("resource", [])
    if len(resources) > 1 or (resources and resources[0] != server.resource):
        raise InvalidTargetError(description=f"This server issues tokens for {server.resource} only")
    return str(resources[0]) if resources else ""


class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS
    server: TenantAuthorizationServer

    def validate_authorization_request(self) -> str:
        redirect_uri: str = super().validate_authorization_request()
        try:
            _check_resource(self.server, self.request)
        except OAuth2Error as error:
            error.redirect_uri = redirect_uri
            raise
        return redirect_uri

    def validate_token_request(self) -> None:
        super().validate_token_request()
        resource = _check_resource(self.server, self.request)
        stored = self.request.authorization_code.row.resource
        if resource and stored and resource != stored:
            raise InvalidTargetError(description="The resource differs from the authorization request's")

    def save_authorization_code(self, code: str, request: Any) -> None:
        authorized: AuthorizedUser = request.user
        payload = request.payload.data
        # Spent codes are kept until they expire (to recognise a replay); then they go.
        AuthorizationCode.objects.filter(grant=authorized.grant, expires_at__lte=timezone.now()).delete()
        AuthorizationCode.objects.create(
            code_hash=hash_secret(code),
            grant=authorized.grant,
            redirect_uri=payload.get("redirect_uri") or "",
            scope=request.scope or "",
            resource=payload.get("resource") or "",
            code_challenge=payload["code_challenge"],
            code_challenge_method="S256",
            expires_at=timezone.now() + timedelta(seconds=settings.TOOLBAY_OAUTH_CODE_SECONDS),
        )

    def query_authorization_code(self, code: str, client: RegisteredClient) -> IssuedCode | None:
        row = (
            AuthorizationCode.objects.select_related("grant__client", "grant__user", "grant__tenant")
            .filter(code_hash=hash_secret(code), grant__client=client.row, grant__tenant=self.server.tenant)
            .first()
        )
        if row is None or row.expires_at <= timezone.now():
            return None
        if row.used_at is not None:
            grant_end_on_replay(grant_id=row.grant_id)
            return None
        return IssuedCode(row)

    def authenticate_user(self, authorization_code: IssuedCode) -> AuthorizedUser | None:
        # Authlib calls this first when it issues tokens: the code is spent here, by one
        # conditional UPDATE, so of simultaneous redemptions exactly one wins; the others
        # are replays and end the consent (RFC 6749 §4.1.2).
        row = authorization_code.row
        _spend_once(AuthorizationCode, row.pk, "used_at", grant_id=row.grant_id, what="authorization code")
        return _authorized(row.grant)

    def delete_authorization_code(self, authorization_code: IssuedCode) -> None:
        pass  # spent in authenticate_user; the row stays until it expires


def _spend_once(
    model: type[AuthorizationCode] | type[RefreshToken], pk: int, stamp: str, *, grant_id: str, what: str
) -> None:
    """Mark a one-use secret spent by one conditional UPDATE: of simultaneous uses exactly one
    wins; the others are replays, which end the consent and every token issued under it."""
    spent = model.objects.filter(pk=pk, **{f"{stamp}__isnull": True}).update(**{stamp: timezone.now()})
    if spent != 1:
        grant_end_on_replay(grant_id=grant_id)
        raise InvalidGrantError(f"The {what} was already used")


class RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = TOKEN_AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: every refresh token is good for one use
    server: TenantAuthorizationServer

    def validate_token_request(self) -> None:
        super().validate_token_request()
        _check_resource(self.server, self.request)

    def authenticate_refresh_token(self, refresh_token: str) -> IssuedRefreshToken | None:
        row = (
            RefreshToken.objects.select_related("grant__client", "grant__user", "grant__tenant")
            .filter(token_hash=hash_secret(refresh_token), grant__tenant=self.server.tenant)
            .first()
        )
        if row is None:
            return None
        if row.revoked_at is not None:
            # A rotated token used again: someone holds a copy. End the consent, and with it
            # every token issued under it.
            grant_end_on_replay(grant_id=row.grant_id)
            return None
        if row.expires_at <= timezone.now() or row.grant.revoked_at is not None:
            return None
        return IssuedRefreshToken(row)

    def authenticate_user(self, refresh_token: IssuedRefreshToken) -> AuthorizedUser | None:
        # Spent by one conditional UPDATE before anything is issued: of simultaneous
        # refreshes exactly one wins; the others are reuse and end the consent.
        row = refresh_token.row
        _spend_once(RefreshToken, row.pk, "revoked_at", grant_id=row.grant_id, what="refresh token")
        return _authorized(row.grant)

    def revoke_old_credential(self, refresh_token: IssuedRefreshToken) -> None:
        pass  # spent in authenticate_user


class AccessTokenGenerator(JWTBearerTokenGenerator):  # type: ignore[misc]
    def __init__(self, server: TenantAuthorizationServer) -> None:
        super().__init__(
            issuer=server.issuer,
            alg=ALGORITHM,
            refresh_token_generator=lambda **_: secrets.token_urlsafe(48),
            expires_generator=lambda client, grant_type: settings.TOOLBAY_OAUTH_ACCESS_TOKEN_SECONDS,
        )
        self.server = server

    def get_jwks(self) -> KeySet:
        # A key set, not the key: joserfc then names the key in the header (``kid``).
        return KeySet([signing_key(self.server.tenant)])

    def get_audiences(self, client: Any, user: Any, scope: str) -> str:
        return self.server.resource

    def get_extra_claims(self, client: Any, grant_type: str, user: AuthorizedUser, scope: str) -> dict[str, Any]:
        return {"gid": user.grant.id, "groups": user.groups}


class Issuer(IssuerParameter):  # type: ignore[misc]
    """RFC 9207: ``iss`` in every authorization response, errors included."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer

    def add_issuer_parameter(self, authorization_server: Any, response: HttpResponse) -> None:
        # Authlib's own version reads response.location (Flask); a Django response has a header.
        location = response.get("Location")
        if location and "iss=" not in urlsplit(location).query:
            response["Location"] = add_params_to_uri(location, {"iss": self.issuer})


@dataclass
class IssuedAccessToken:
    """An access token presented for revocation: its signature and issuer checked, so that
    nobody revokes a consent by forging a token that names it."""

    grant: Grant

    def check_client(self, client: RegisteredClient) -> bool:
        return bool(self.grant.client.client_id == client.get_client_id())


class Revocation(RevocationEndpoint):  # type: ignore[misc]
    """RFC 7009: a client revokes a refresh or an access token; either ends the consent it
    was issued under, and with it every token of that consent (``grant_revoke``)."""

    CLIENT_AUTH_METHODS = TOKEN_AUTH_METHODS
    server: TenantAuthorizationServer

    def query_token(
        self, token_string: str, token_type_hint: str | None
    ) -> IssuedRefreshToken | IssuedAccessToken | None:
        if not isinstance(token_string, str) or len(token_string) > MAX_TOKEN_LENGTH:
            return None
        row = (
            RefreshToken.objects.select_related("grant__client")
            .filter(token_hash=hash_secret(token_string), grant__tenant=self.server.tenant)
            .first()
        )
        if row is not None:
            return IssuedRefreshToken(row)
        return self._access_token(token_string)

    def _access_token(self, token_string: str) -> IssuedAccessToken | None:
        if token_string.count(".") != 2:
            return None
        try:
            decoded = decode_access_token(token_string, public_key_set(self.server.tenant.pk))
        except (JoseError, ValueError, UnicodeError):
            return None
        # Expired tokens may be revoked too (RFC 7009 §2.2 answers 200 either way).
        if decoded.header.get("typ") != "at+jwt" or decoded.claims.get("iss") != self.server.issuer:
            return None
        grant = (
            Grant.objects.select_related("client")
            .filter(pk=str(decoded.claims.get("gid") or ""), tenant=self.server.tenant)
            .first()
        )
        return IssuedAccessToken(grant) if grant is not None else None

    def revoke_token(self, token: IssuedRefreshToken | IssuedAccessToken, request: Any) -> None:
        grant = token.row.grant if isinstance(token, IssuedRefreshToken) else token.grant
        grant_end(grant_id=grant.pk)


class ClientClaims(ClientMetadataClaims):  # type: ignore[misc]
    def validate_redirect_uris(self) -> None:
        # Authlib wants a host in every redirect URI, which refuses a native app's
        # private-use scheme (com.example.app:/cb); clients.check_redirect_uris decides.
        pass


class Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    """RFC 7591, open to anyone (MCP clients register themselves), within the limits of
    ``oauth.server.views.register`` and ``clients.client_fields``."""

    server: TenantAuthorizationServer

    def __init__(self, server: Any = None, claims_classes: Any = None) -> None:
        super().__init__(server, claims_classes or [ClientClaims])
        self.issued_secrets: dict[str, str | None] = {}

    def authenticate_token(self, request: Any) -> bool:
        return True

    def get_server_metadata(self) -> dict[str, Any]:
        return self.server.metadata()

    def generate_client_info(self, request: Any) -> dict[str, Any]:
        return {}  # save_client makes the id and the secret

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> Any:
        metadata = dict(client_metadata)
        metadata.setdefault("token_endpoint_auth_method", "client_secret_basic")
        try:
            row, secret = register_client(
                tenant=self.server.tenant, metadata=metadata, kind=OAuthClient.Kind.REGISTERED
            )
        except ClientMetadataError as exc:
            raise OAuth2Error(description=str(exc), error="invalid_client_metadata", status_code=400) from None
        self.issued_secrets[row.client_id] = secret  # said once, in the answer
        return row

    def generate_client_registration_info(self, client: OAuthClient, request: Any) -> dict[str, Any]:
        info: dict[str, Any] = {
            "client_id": client.client_id,
            "client_id_issued_at": int(client.created_at.timestamp()),
            "redirect_uris": client.redirect_uris,
            "grant_types": client.grant_types,
            "response_types": ["code"],
            "token_endpoint_auth_method": client.token_endpoint_auth_method,
        }
        secret = self.issued_secrets.get(client.client_id)
        if secret is not None:
            info.update(client_secret=secret, client_secret_expires_at=0)
        return info


class TenantAuthorizationServer(AuthorizationServer):  # type: ignore[misc]
    def __init__(
        self, tenant: Tenant, config: TenantOAuth, origin: str, *, admit_new_client: Callable[[], bool] | None = None
    ) -> None:
        super().__init__(scopes_supported=config.scopes_supported)
        self.tenant = tenant
        # Given only for a signed-in user's authorization request: the one place where an
        # unknown metadata document client may be fetched (and counted as a registration).
        self.admit_new_client = admit_new_client
        self.config = config
        self.origin = locations.canonical_origin(origin)
        self.issuer = locations.issuer_url(origin, tenant.slug)
        self.resource = locations.resource_url(origin, tenant.slug)
        self.register_grant(CodeGrant, [S256Challenge(required=True)])
        self.register_grant(RefreshGrant)
        self.register_token_generator("default", AccessTokenGenerator(self))
        self.issuer_parameter = Issuer(self.issuer)
        self.register_extension(self.issuer_parameter)
        self.register_endpoint(Revocation)
        self.register_endpoint(Registration)

    def endpoint(self, name: str) -> str:
        return f"{self.issuer}/{name}"

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 (and the MCP authorization profile's additions)."""
        document: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": self.endpoint("authorize"),
            "token_endpoint": self.endpoint("token"),
            "jwks_uri": self.endpoint("jwks"),
            "revocation_endpoint": self.endpoint("revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": TOKEN_AUTH_METHODS,
            "revocation_endpoint_auth_methods_supported": TOKEN_AUTH_METHODS,
            "scopes_supported": self.config.scopes_supported,
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self.config.registration_open,
            "service_documentation": f"{self.origin}/oauth/authorizations/",
        }
        if self.config.registration_open:
            document["registration_endpoint"] = self.endpoint("register")
        return document

    # --- what Authlib leaves to the application -------------------------------------------

    def query_client(self, client_id: str) -> RegisteredClient | None:
        if not isinstance(client_id, str) or not client_id or len(client_id) > 500:
            return None
        row = find_client(
            self.tenant, client_id, registration_open=self.config.registration_open, admit_new=self.admit_new_client
        )
        return RegisteredClient(row, self.config.scopes_supported) if row is not None else None

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        refresh = token.get("refresh_token")
        if refresh:
            authorized: AuthorizedUser = request.user
            RefreshToken.objects.create(
                token_hash=hash_secret(refresh),
                grant=authorized.grant,
                scope=token.get("scope", ""),
                expires_at=timezone.now() + timedelta(days=settings.TOOLBAY_OAUTH_REFRESH_TOKEN_DAYS),
            )

    def create_oauth2_request(self, request: Any) -> Any:
        return request if isinstance(request, DjangoOAuth2Request) else DjangoOAuth2Request(request)

    def create_json_request(self, request: HttpRequest) -> Any:
        return DjangoJsonRequest(request)

    def handle_response(self, status_code: int, payload: Any, headers: list[tuple[str, str]]) -> HttpResponse:
        if isinstance(payload, dict):
            payload = json_dumps(payload)
        response = HttpResponse(payload, status=status_code)
        for name, value in headers:
            response[name] = value
        return response

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        pass


@transaction.atomic
def consent_record(*, tenant: Tenant, user: Any, client: OAuthClient, scope: str) -> Grant:
    """The user's consent for this client on this tenant, widened to ``scope`` (one active
    consent per user, client and tenant)."""
    grant = (
        Grant.objects.select_for_update()
        .filter(tenant=tenant, user=user, client=client, revoked_at__isnull=True)
        .first()
    )
    if grant is None:
        return Grant.objects.create(tenant=tenant, user=user, client=client, scope=scope)
    wanted = list(dict.fromkeys([*grant.scope.split(), *scope.split()]))
    if set(wanted) != set(grant.scope.split()):
        grant.scope = " ".join(wanted)
        grant.save(update_fields=["scope", "updated_at"])
    return grant


def consent_covers(*, tenant: Tenant, user: Any, client: OAuthClient, scope: str) -> Grant | None:
    """The user's active consent, when it already covers ``scope`` (no need to ask again)."""
    grant = Grant.objects.filter(tenant=tenant, user=user, client=client, revoked_at__isnull=True).first()
    if grant is not None and set(scope.split()) <= set(grant.scope.split()):
        return grant
    return None


@transaction.atomic
def grant_end(*, grant_id: str) -> None:
    """End a consent if it still stands (``grant_revoke``); simultaneous calls end it once."""
    grant = Grant.objects.select_for_update().filter(pk=grant_id, revoked_at__isnull=True).first()
    if grant is not None:
        grant_revoke(grant=grant)


def grant_end_on_replay(*, grant_id: str) -> None:
    """A spent code or refresh token came back: someone holds a copy. End the consent."""
    log.warning("OAuth consent %s ended: a spent code or refresh token was presented again", grant_id)
    grant_end(grant_id=grant_id)


@transaction.atomic
def grant_revoke(*, grant: Grant) -> None:
    """End a consent: its access tokens stop working on the next request on every process
    (the tenant's generation moves, and the consent drops out of the snapshot the resource
    server checks tokens against), its refresh tokens and codes are void."""
    now = timezone.now()
    grant.revoked_at = now
    grant.save(update_fields=["revoked_at", "updated_at"])
    RefreshToken.objects.filter(grant=grant, revoked_at__isnull=True).update(revoked_at=now)
    AuthorizationCode.objects.filter(grant=grant).delete()
