"""Reads of per-user connections: providers a tenant may use, a user's connections."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

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


DISCOVERY_SUFFIXES = ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server")


def _same(a: str, b: str) -> bool:
    return bool(a) and bool(b) and a.rstrip("/") == b.rstrip("/")


def _under(url: str, issuer: str) -> bool:
    """``url`` is on the issuer's origin, at or below its path."""
    if not url or not issuer:
        return False
    left, right = urlsplit(url), urlsplit(issuer.rstrip("/"))
    if (left.scheme, left.netloc.lower()) != (right.scheme, right.netloc.lower()):
        return False
    return left.path == right.path or left.path.startswith(right.path + "/")


def _match_score(provider: ConnectionProvider, urls: dict[str, str]) -> int:
    """3: a configured endpoint is the one the description names; 2: the description's
    OpenID Connect discovery URL is the issuer's; 1: its URLs lie under the issuer; 0: none."""
    if _same(provider.authorization_endpoint, urls.get("authorization_url", "")) or _same(
        provider.token_endpoint, urls.get("token_url", "")
    ):
        return 3
    discovery = urls.get("openid_connect_url", "")
    if provider.issuer and any(_same(discovery, provider.issuer.rstrip("/") + suffix) for suffix in DISCOVERY_SUFFIXES):
        return 2
    if any(_under(url, provider.issuer) for url in urls.values()):
        return 1
    return 0


def providers_matching(tenant_id: int | None, urls: dict[str, str]) -> list[str]:
    """The providers a tenant's tools may use whose endpoints or issuer match where an API
    description says tokens come from: the best matches only (several: it cannot tell), a
    tenant's own before the platform's, a platform provider its tenant's namesake hides left out."""
    providers = list(providers_of(tenant_id))
    own = {provider.name for provider in providers if provider.tenant_id is not None}
    ranked = sorted(
        (
            (_match_score(provider, urls), provider.tenant_id is not None, provider.name)
            for provider in providers
            if provider.tenant_id is not None or provider.name not in own
        ),
        reverse=True,
    )
    if not ranked or ranked[0][0] == 0:
        return []
    best = ranked[0][:2]
    return sorted(name for score, is_own, name in ranked if (score, is_own) == best)


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
