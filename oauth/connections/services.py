"""Writes of per-user connections: providers, connect links, connections (store, refresh,
disconnect). Each change that matters is an AuditEvent; no token ever goes into one."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.services import audit_change
from oauth.connections import client
from oauth.connections.selectors import provider_secret
from oauth.models import ConnectAttempt, Connection, ConnectionProvider
from oauth.sealing import seal, unseal
from tenants.models import Tenant
from tools_app.backends.connections import Caller
from tools_app.runs.delivery import relay

ELICITATION_COMPLETE = "notifications/elicitation/complete"

PLATFORM_SEGMENT = "_platform"
PROVIDER_FIELDS = (
    "display_name",
    "issuer",
    "authorization_endpoint",
    "token_endpoint",
    "revocation_endpoint",
    "userinfo_endpoint",
    "client_id",
    "token_endpoint_auth_method",
    "scopes",
    "pkce",
    "extra_authorize_params",
)


def redirect_uri(base: str, provider: ConnectionProvider) -> str:
    """``<base>/connect/<tenant>/<provider>/callback`` (``_platform`` for a platform
    provider): what to register at the provider."""
    slug = provider.tenant.slug if provider.tenant is not None else PLATFORM_SEGMENT
    return f"{base.rstrip('/')}/connect/{slug}/{provider.name}/callback"


def public_base() -> str:
    return settings.TOOLBAY_PUBLIC_URL or "http://localhost:8000"


def _provider_snapshot(provider: ConnectionProvider) -> dict[str, Any]:
    return {field: getattr(provider, field) for field in ("name", *PROVIDER_FIELDS)}


@transaction.atomic
def provider_save(
    *, tenant: Tenant | None, name: str, fields: dict[str, Any], client_secret: str | None = None
) -> ConnectionProvider:
    """Create the provider, or update the tenant's provider of that name. ``client_secret``
    None keeps the stored one. Raises ValidationError on bad settings."""
    unknown = set(fields) - set(PROVIDER_FIELDS)
    if unknown:
        raise ValueError(f"unknown provider fields {sorted(unknown)}")
    provider = ConnectionProvider.objects.select_for_update().filter(tenant=tenant, name=name).first()
    before = _provider_snapshot(provider) if provider is not None else None
    if provider is None:
        provider = ConnectionProvider(tenant=tenant, name=name)
    for key, value in fields.items():
        setattr(provider, key, value)
    if client_secret is not None:
        provider.client_secret_sealed = seal(client_secret) if client_secret else ""
    provider.full_clean(exclude=["client_secret_sealed"])
    provider.save()
    extra = {"client_secret": ["", "(changed)"]} if client_secret is not None else None
    audit_change(provider, "created" if before is None else "updated", before, _provider_snapshot(provider), extra)
    return provider


def attempt_create(
    *, caller: Caller, provider: ConnectionProvider, scopes: list[str], user_id: int | None, session_id: str = ""
) -> ConnectAttempt:
    # The caller's links that can no longer be used go when a new one is made.
    ConnectAttempt.objects.filter(provider=provider, subject=caller.subject, expires_at__lt=timezone.now()).delete()
    return ConnectAttempt.objects.create(
        tenant_id=caller.tenant_id,
        provider=provider,
        subject=caller.subject,
        user_id=user_id,
        label=caller.label,
        scopes=scopes,
        mcp_session_id=session_id[:100],
        expires_at=timezone.now() + timedelta(seconds=settings.TOOLBAY_CONNECT_LINK_SECONDS),
    )


def attempt_start(*, attempt_id: str, user_id: int, session_key: str) -> tuple[ConnectAttempt, str] | None:
    """Bind the link to this browser session (once); returns the attempt and the PKCE
    verifier, or None when the link is unknown, spent, expired or someone else's."""
    state = secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(48)
    taken = ConnectAttempt.objects.filter(
        pk=attempt_id, user_id=user_id, started_at__isnull=True, used_at__isnull=True, expires_at__gt=timezone.now()
    ).update(state=state, code_verifier_sealed=seal(verifier), session_key=session_key, started_at=timezone.now())
    if taken != 1:
        return None
    return ConnectAttempt.objects.select_related("provider", "tenant").get(pk=attempt_id), verifier


def attempt_finish(*, state: str, user_id: int, session_key: str) -> tuple[ConnectAttempt, str] | None:
    """Spend the attempt the provider's callback names, if it was started by this user in this
    browser session and has not expired; None otherwise (also for a second use)."""
    if not state:
        return None
    spent = ConnectAttempt.objects.filter(
        state=state,
        user_id=user_id,
        session_key=session_key,
        started_at__isnull=False,
        used_at__isnull=True,
        expires_at__gt=timezone.now(),
    ).update(used_at=timezone.now())
    if spent != 1:
        return None
    attempt = ConnectAttempt.objects.select_related("provider", "tenant").get(state=state)
    return attempt, unseal(attempt.code_verifier_sealed)


def _expiry(token: dict[str, Any]) -> Any:
    if isinstance(token.get("expires_at"), int | float):
        return datetime.fromtimestamp(float(token["expires_at"]), tz=UTC)
    if isinstance(token.get("expires_in"), int | float):
        return timezone.now() + timedelta(seconds=float(token["expires_in"]))
    return None


def _snapshot(connection: Connection) -> dict[str, Any]:
    return {
        "provider": connection.provider.name,
        "label": connection.label,
        "account": connection.account,
        "scopes": connection.scopes,
        "expires_at": connection.expires_at.isoformat() if connection.expires_at else None,
    }


@transaction.atomic
def connection_store(*, attempt: ConnectAttempt, token: dict[str, Any], account: str) -> Connection:
    """Store (or replace) the connection of the attempt's principal at its provider."""
    connection = (
        Connection.objects.select_for_update()
        .select_related("provider")
        .filter(provider=attempt.provider, subject=attempt.subject)
        .first()
    )
    before = _snapshot(connection) if connection is not None else None
    if connection is None:
        connection = Connection(tenant_id=attempt.tenant_id, provider=attempt.provider, subject=attempt.subject)
    connection.user_id = attempt.user_id
    connection.label = attempt.label
    connection.account = account
    connection.access_token_sealed = seal(token["access_token"])
    refresh_token = token.get("refresh_token")
    connection.refresh_token_sealed = seal(refresh_token) if isinstance(refresh_token, str) else ""
    connection.expires_at = _expiry(token)
    granted = token.get("scope")
    connection.scopes = granted.split() if isinstance(granted, str) else list(attempt.scopes)
    connection.refreshed_at = None
    connection.save()
    audit_change(
        connection,
        "created" if before is None else "updated",
        before,
        _snapshot(connection),
        {"event": ["", "connected"]},
    )
    if attempt.mcp_session_id:
        # MCP 2025-11-25: the session that was sent the link learns that it was followed, on
        # whichever process holds its stream (the callback may land on any).
        tenant_id, session_id, elicitation_id = attempt.tenant_id, attempt.mcp_session_id, attempt.pk
        transaction.on_commit(lambda: _tell_session(tenant_id, session_id, elicitation_id))
    return connection


def _tell_session(tenant_id: int, session_id: str, elicitation_id: str) -> None:
    async def tell() -> None:  # the relay's Redis client belongs to the loop that runs it
        await relay().session_notify(tenant_id, session_id, ELICITATION_COMPLETE, {"elicitationId": elicitation_id})

    async_to_sync(tell)()


def connection_refreshed(*, connection_id: int, token: dict[str, Any]) -> Connection:
    """Store what a refresh returned (a provider may or may not rotate the refresh token)."""
    connection = Connection.objects.select_related("provider").get(pk=connection_id)
    connection.access_token_sealed = seal(token["access_token"])
    if isinstance(token.get("refresh_token"), str):
        connection.refresh_token_sealed = seal(token["refresh_token"])
    connection.expires_at = _expiry(token)
    connection.refreshed_at = timezone.now()
    connection.save(update_fields=["access_token_sealed", "refresh_token_sealed", "expires_at", "refreshed_at"])
    return connection


def connection_drop(*, connection: Connection, reason: str) -> None:
    """Forget a connection the provider no longer honours (a refresh failed): audited."""
    before = _snapshot(connection)
    audit_change(connection, "deleted", before, None, {"event": ["", reason]})
    Connection.objects.filter(pk=connection.pk).delete()


def connection_disconnect(*, connection: Connection) -> bool:
    """Revoke the grant at the provider (refresh token first: it ends the grant at most
    providers), then forget the connection. Returns whether the provider confirmed."""
    provider = connection.provider
    secret = provider_secret(provider)
    revoked = False
    if connection.refresh_token_sealed:
        revoked = async_to_sync(client.revoke)(
            provider, secret, token=unseal(connection.refresh_token_sealed), hint="refresh_token"
        )
    access_revoked = async_to_sync(client.revoke)(
        provider, secret, token=unseal(connection.access_token_sealed), hint="access_token"
    )
    before = _snapshot(connection)
    audit_change(
        connection,
        "deleted",
        before,
        None,
        {"event": ["", "disconnected"], "revoked_at_provider": [None, revoked or access_revoked]},
    )
    Connection.objects.filter(pk=connection.pk).delete()
    return revoked or access_revoked
