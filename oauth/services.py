"""Writes of the OAuth app (settings, trusted issuers, pre-registered clients). Generations
move through ``oauth.signals`` after commit; the change audit records each row."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from oauth.models import OAuthClient, TenantOAuth, TrustedIssuer
from oauth.sealing import seal
from oauth.server.clients import register_client
from tenants.models import Tenant

SETTINGS_FIELDS = ("enabled", "embedded_server", "registration_open", "list_scope", "call_scope")
ISSUER_FIELDS = (
    "issuer", "enabled", "advertise", "validation", "discovery", "jwks_uri", "introspection_endpoint", "client_id",
    "audience", "subject_claim", "groups_claim", "scope_claim",
)  # fmt: skip


@transaction.atomic
def oauth_settings_set(*, tenant: Tenant, changes: dict[str, Any]) -> TenantOAuth:
    """Create or change the tenant's OAuth settings (a subset of ``SETTINGS_FIELDS``)."""
    unknown = set(changes) - set(SETTINGS_FIELDS)
    if unknown:
        raise ValueError(f"not OAuth settings: {sorted(unknown)}")
    row = TenantOAuth.objects.select_for_update().filter(tenant=tenant).first() or TenantOAuth(tenant=tenant)
    for name, value in changes.items():
        setattr(row, name, value)
    row.full_clean()
    row.save()
    return row


@transaction.atomic
def trusted_issuer_save(
    *, tenant: Tenant, fields: dict[str, Any], client_secret: str | None = None, issuer: TrustedIssuer | None = None
) -> TrustedIssuer:
    """Create (``issuer`` None) or change a trusted issuer; ``client_secret`` (when not None)
    replaces the sealed introspection secret ("" clears it)."""
    unknown = set(fields) - set(ISSUER_FIELDS)
    if unknown:
        raise ValueError(f"not issuer fields: {sorted(unknown)}")
    row = issuer or TrustedIssuer(tenant=tenant)
    for name, value in fields.items():
        setattr(row, name, value)
    if client_secret is not None:
        row.client_secret_sealed = seal(client_secret) if client_secret else ""
    row.full_clean()
    row.save()
    return row


@transaction.atomic
def client_preregister(
    *, tenant: Tenant, name: str, redirect_uris: list[str], public: bool = True, created_by: Any = None
) -> tuple[OAuthClient, str | None]:
    """A client an admin registers (no dynamic registration needed); returns it and its
    secret (None for a public client), which is shown once."""
    metadata = {
        "client_name": name,
        "redirect_uris": redirect_uris,
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none" if public else "client_secret_basic",
    }
    return register_client(tenant=tenant, metadata=metadata, kind=OAuthClient.Kind.PREREGISTERED, created_by=created_by)
