"""Reads of the OAuth app. Every query starts from a tenant (by slug, active only), a user or
the signed-in user's ``TenantScope``."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from oauth.models import Grant, OAuthClient, TenantOAuth, TrustedIssuer
from tenants.models import Tenant
from tenants.scope import TenantScope
from tenants.selectors import tenant_active_by_slug


def resource_settings(slug: str) -> tuple[Tenant, TenantOAuth, list[TrustedIssuer]] | None:
    """An active tenant with OAuth on: its settings and enabled issuers; else None."""
    tenant = tenant_active_by_slug(slug)
    if tenant is None:
        return None
    config = TenantOAuth.objects.filter(tenant=tenant, enabled=True).first()
    if config is None:
        return None
    return tenant, config, list(TrustedIssuer.objects.filter(tenant=tenant, enabled=True))


def server_settings(slug: str) -> tuple[Tenant, TenantOAuth] | None:
    """An active tenant whose OAuth uses the embedded authorization server; else None."""
    found = resource_settings(slug)
    if found is None or not found[1].embedded_server:
        return None
    return found[0], found[1]


def grants_of_user(user: Any) -> QuerySet[Grant]:
    """The user's standing consents, newest first, with tenant and client."""
    return Grant.objects.filter(user=user, revoked_at__isnull=True).select_related("tenant", "client")


def oauth_settings_in(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[TenantOAuth]:
    rows = TenantOAuth.objects.filter(scope.within("tenant")).select_related("tenant")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)


def trusted_issuers_in(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[TrustedIssuer]:
    rows = TrustedIssuer.objects.filter(scope.within("tenant")).select_related("tenant")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)


def oauth_clients_in(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[OAuthClient]:
    rows = OAuthClient.objects.filter(scope.within("tenant")).select_related("tenant")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)


def grants_in(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[Grant]:
    rows = Grant.objects.filter(scope.within("tenant")).select_related("tenant", "client", "user")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)
