"""Clients of the embedded authorization server: lookup, Client ID Metadata Documents, and
the checks every client's metadata passes (registered, fetched or typed by an admin).

A client whose ``client_id`` is an https URL with a path is a Client ID Metadata Document
client (draft-ietf-oauth-client-id-metadata-document): its metadata is the JSON document at
that URL, fetched through the SSRF-guarded outbound client, size- and time-bounded, no
redirects, kept ``TOOLBAY_OAUTH_CIMD_CACHE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from authlib.oauth2.rfc6749 import ClientMixin
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from oauth.models import OAuthClient
from oauth.resource.remote import FetchFailed, fetch_json
from tenants.models import Tenant

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
# RFC 8252 §7.1: a native app's private-use scheme is a reverse domain name it controls
# (com.example.app), so it has a dot; that also keeps out ftp, ws, javascript and the like.
PRIVATE_USE_SCHEME = re.compile(r"[a-z][a-z0-9+\-]*(\.[a-z0-9+\-]+)+")
MAX_REDIRECT_URIS = 10
ALLOWED_AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")


class ClientMetadataError(Exception):
    """Client metadata Toolbay will not accept; the message names the field."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def is_metadata_document_url(client_id: str) -> bool:
    parts = urlsplit(client_id)
    return parts.scheme == "https" and bool(parts.netloc) and parts.path not in ("", "/") and not parts.fragment


def check_redirect_uris(uris: Any) -> list[str]:
    """As RFC 8252 says: https anywhere, http to a loopback address only (§7.3), and a native
    app's private-use scheme (§7.1, ``com.example.app:/callback``); no other scheme."""
    if not isinstance(uris, list) or not uris or not all(isinstance(uri, str) for uri in uris):
        raise ClientMetadataError("redirect_uris: a non-empty list of URLs is required")
    if len(uris) > MAX_REDIRECT_URIS:
        raise ClientMetadataError(f"redirect_uris: at most {MAX_REDIRECT_URIS}")
    for uri in uris:
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        if len(uri) > 2000 or parts.fragment or not scheme:
            raise ClientMetadataError(f"redirect_uris: {uri!r} is not an absolute URL without a fragment")
        if scheme in ("http", "https"):
            if not parts.hostname or "@" in parts.netloc:
                raise ClientMetadataError(f"redirect_uris: {uri!r} has no host, or hides it behind user info")
            if scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
                raise ClientMetadataError(f"redirect_uris: {uri!r}: plain http only to a loopback address")
        elif not PRIVATE_USE_SCHEME.fullmatch(scheme):
            raise ClientMetadataError(
                f"redirect_uris: the scheme {scheme!r} is not allowed (https, http to loopback, or a private-use "
                "scheme such as com.example.app)"
            )
    return list(uris)


def _loopback_match(registered: str, presented: str) -> bool:
    """RFC 8252 §7.3: a loopback redirect matches whatever port the native app listens on."""
    a, b = urlsplit(registered), urlsplit(presented)
    return (
        a.scheme == b.scheme == "http"
        and a.hostname in LOOPBACK_HOSTS
        and a.hostname == b.hostname
        and a.path == b.path
        and a.query == b.query
    )


class RegisteredClient(ClientMixin):  # type: ignore[misc]
    """An ``OAuthClient`` row as Authlib sees a client."""

    def __init__(self, row: OAuthClient, scopes_supported: list[str]) -> None:
        self.row = row
        self.scopes_supported = scopes_supported

    @property
    def client_name(self) -> str:
        return self.row.client_name or self.row.client_id

    def get_client_id(self) -> str:
        return self.row.client_id

    def get_default_redirect_uri(self) -> str | None:
        uris = self.row.redirect_uris or []
        return uris[0] if len(uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        if not scope:
            return " ".join(self.scopes_supported)
        return " ".join(word for word in dict.fromkeys(scope.split()) if word in self.scopes_supported)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return any(uri == redirect_uri or _loopback_match(uri, redirect_uri) for uri in self.row.redirect_uris or [])

    def check_client_secret(self, client_secret: str) -> bool:
        return bool(self.row.secret_hash) and hmac.compare_digest(self.row.secret_hash, hash_secret(client_secret))

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.row.token_endpoint_auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in (self.row.grant_types or ["authorization_code"])


def client_fields(metadata: dict[str, Any]) -> dict[str, Any]:
    """The checked columns of a client from its metadata (RFC 7591 names)."""
    redirect_uris = check_redirect_uris(metadata.get("redirect_uris"))
    grant_types = metadata.get("grant_types") or ["authorization_code"]
    if not isinstance(grant_types, list) or not set(grant_types) <= {"authorization_code", "refresh_token"}:
        raise ClientMetadataError("grant_types: only authorization_code and refresh_token")
    if "authorization_code" not in grant_types:
        raise ClientMetadataError("grant_types: authorization_code is required")
    response_types = metadata.get("response_types") or ["code"]
    if response_types != ["code"]:
        raise ClientMetadataError("response_types: only code")
    method = metadata.get("token_endpoint_auth_method") or "client_secret_basic"
    if method not in ALLOWED_AUTH_METHODS:
        raise ClientMetadataError(f"token_endpoint_auth_method: one of {', '.join(ALLOWED_AUTH_METHODS)}")
    name = metadata.get("client_name") or ""
    client_uri = metadata.get("client_uri") or ""
    if not isinstance(name, str) or len(name) > 200:
        raise ClientMetadataError("client_name: a string of at most 200 characters")
    if (
        not isinstance(client_uri, str)
        or len(client_uri) > 500
        or (client_uri and not client_uri.startswith("https://"))
    ):
        raise ClientMetadataError("client_uri: an https URL of at most 500 characters")
    return {
        "client_name": name,
        "client_uri": client_uri,
        "redirect_uris": redirect_uris,
        "grant_types": grant_types,
        "token_endpoint_auth_method": method,
    }


async def _fetch_document(client_id: str) -> dict[str, Any]:
    document = await fetch_json(client_id)
    if document.get("client_id") != client_id:
        raise ClientMetadataError("the metadata document's client_id is not its own URL")
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise ClientMetadataError("a metadata document client authenticates with 'none' (it has no secret here)")
    return document


def _refresh_document_client(tenant: Tenant, row: OAuthClient | None, client_id: str) -> OAuthClient | None:
    if row is None and _tenant_full(tenant):
        return None
    try:
        document = async_to_sync(_fetch_document)(client_id)
        fields = client_fields({**document, "token_endpoint_auth_method": "none"})
    except (FetchFailed, ClientMetadataError):
        return None
    if row is None:
        row = OAuthClient(tenant=tenant, client_id=client_id, kind=OAuthClient.Kind.METADATA_DOCUMENT)
    for name, value in fields.items():
        setattr(row, name, value)
    row.metadata = {key: document[key] for key in list(document)[:50]}
    row.fetched_at = timezone.now()
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:  # fetched by another request meanwhile
        return OAuthClient.objects.filter(tenant=tenant, client_id=client_id).first()
    return row


def _tenant_full(tenant: Tenant) -> bool:
    return OAuthClient.objects.filter(tenant=tenant).count() >= settings.TOOLBAY_OAUTH_MAX_CLIENTS_PER_TENANT


def find_client(
    tenant: Tenant, client_id: str, *, registration_open: bool, admit_new: Callable[[], bool] | None = None
) -> OAuthClient | None:
    """The tenant's client. A metadata document client is (re)read when unknown or stale,
    but only when ``admit_new`` is given (the signed-in authorization step; never the token
    endpoint, which anyone can call): an unknown one is then a new client, made only if
    ``admit_new()`` (the registration rate limit) allows it and the tenant has room."""
    row = OAuthClient.objects.filter(tenant=tenant, client_id=client_id).first()
    if not is_metadata_document_url(client_id) or (row is not None and row.kind != OAuthClient.Kind.METADATA_DOCUMENT):
        return row
    if admit_new is None:
        return row
    if row is None and (not registration_open or not admit_new()):
        return None
    max_age = timedelta(seconds=settings.TOOLBAY_OAUTH_CIMD_CACHE_SECONDS)
    if row is not None and row.fetched_at is not None and timezone.now() - row.fetched_at < max_age:
        return row
    return _refresh_document_client(tenant, row, client_id) or row


def register_client(
    *, tenant: Tenant, metadata: dict[str, Any], kind: str, created_by: Any = None, client_id: str = ""
) -> tuple[OAuthClient, str | None]:
    """A new client from RFC 7591 metadata; returns it and its secret (None for public clients)."""
    import secrets

    fields = client_fields(metadata)
    if _tenant_full(tenant):
        raise ClientMetadataError("this tenant has as many clients as it may have")
    secret = None if fields["token_endpoint_auth_method"] == "none" else secrets.token_urlsafe(32)
    row = OAuthClient(
        tenant=tenant,
        client_id=client_id or f"tbc_{secrets.token_urlsafe(18)}",
        kind=kind,
        secret_hash=hash_secret(secret) if secret else "",
        metadata={key: value for key, value in metadata.items() if key != "client_secret"},
        created_by=created_by,
        **fields,
    )
    try:
        row.full_clean(exclude=["metadata", "secret_hash"])
    except ValidationError as exc:
        raise ClientMetadataError("; ".join(exc.messages)) from None
    row.save()
    return row, secret
