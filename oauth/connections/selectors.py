"""Reads of per-user connections: providers a tenant may use, a user's connections."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from oauth.models import Connection, ConnectionProvider
from oauth.sealing import unseal
from tenants.scope import TenantScope


def providers_of(tenant_id: int | None) -> QuerySet[ConnectionProvider]:
    """The providers a tenant's tools may use: its own and the platform's."""
    if tenant_id is None:
        return ConnectionProvider.objects.filter(tenant__isnull=True)
    return ConnectionProvider.objects.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True))


def provider_named(tenant_id: int | None, name: str) -> ConnectionProvider | None:
    """The tenant's provider of that name, else the platform's."""
    found = list(providers_of(tenant_id).filter(name=name).select_related("tenant"))
    found.sort(key=lambda provider: provider.tenant_id is None)
    return found[0] if found else None


def provider_secret(provider: ConnectionProvider) -> str:
    return (
        unseal(provider.client_secret_sealed, name=f"client secret of {provider.name}")
        if provider.client_secret_sealed
        else ""
    )


def connections_of_user(user: Any) -> QuerySet[Connection]:
    return Connection.objects.filter(user=user).select_related("provider", "tenant").order_by("provider__name")


def connections_in(tenant_ids: list[int] | None) -> QuerySet[Connection]:
    rows = Connection.objects.select_related("provider", "tenant", "user")
    return rows if tenant_ids is None else rows.filter(tenant_id__in=tenant_ids)


def providers_in(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[ConnectionProvider]:
    rows = ConnectionProvider.objects.filter(scope.within("tenant")).select_related("tenant")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)


def connections_in_scope(scope: TenantScope, *, tenant_slug: str | None = None) -> QuerySet[Connection]:
    rows = Connection.objects.filter(scope.within("tenant")).select_related("tenant", "provider", "user")
    return rows if tenant_slug is None else rows.filter(tenant__slug=tenant_slug)
