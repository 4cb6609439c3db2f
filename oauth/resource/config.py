"""A tenant's OAuth settings as the hot path reads them: one load per tenant generation.

Everything that changes what a token may do on a tenant (its OAuth settings, the issuers it
trusts, consents given or revoked, members who come or go) bumps the tenant's generation
(``oauth.signals``), so the snapshot loaded for a ``TenantRecord`` is current for as long as
that record is.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from oauth.models import Grant, TenantOAuth, TrustedIssuer
from oauth.sealing import SecretUnavailable, unseal


@dataclass(frozen=True)
class IssuerSettings:
    issuer: str
    validation: str  # "jwt" or "introspection"
    advertise: bool
    discovery: bool
    jwks_uri: str
    introspection_endpoint: str
    client_id: str
    client_secret: str
    audience: str  # empty: the tenant's resource URL
    subject_claim: str
    groups_claim: str
    scope_claim: str


@dataclass(frozen=True)
class OAuthSettings:
    enabled: bool
    embedded: bool
    list_scope: str
    call_scope: str
    issuers: dict[str, IssuerSettings]
    # Consents of the embedded server whose tokens are good: not revoked, their user active
    # and still a member of the tenant.
    active_grants: frozenset[str]

    @property
    def scopes_supported(self) -> list[str]:
        return [scope for scope in dict.fromkeys((self.list_scope, self.call_scope)) if scope]

    @property
    def advertised(self) -> bool:
        """Whether the tenant offers a working authorization server to clients."""
        return self.enabled and (self.embedded or any(i.advertise for i in self.issuers.values()))


OFF = OAuthSettings(False, False, "", "", {}, frozenset())


def _secret(row: TrustedIssuer) -> str:
    if not row.client_secret_sealed:
        return ""
    try:
        return unseal(row.client_secret_sealed, name=f"introspection secret of {row.issuer}")
    except SecretUnavailable:
        return ""  # introspection then fails with a clear 401; the admin re-enters the secret


def load_settings(tenant_id: int) -> OAuthSettings:
    row = TenantOAuth.objects.filter(tenant_id=tenant_id).first()
    if row is None or not row.enabled:
        return OFF
    issuers = {
        issuer.issuer: IssuerSettings(
            issuer=issuer.issuer,
            validation=issuer.validation,
            advertise=issuer.advertise,
            discovery=issuer.discovery,
            jwks_uri=issuer.jwks_uri,
            introspection_endpoint=issuer.introspection_endpoint,
            client_id=issuer.client_id,
            client_secret=_secret(issuer),
            audience=issuer.audience,
            subject_claim=issuer.subject_claim or "sub",
            groups_claim=issuer.groups_claim,
            scope_claim=issuer.scope_claim or "scope",
        )
        for issuer in TrustedIssuer.objects.filter(tenant_id=tenant_id, enabled=True)
    }
    grants: frozenset[str] = frozenset()
    if row.embedded_server:
        members = Q(user__is_active=True, user__memberships__tenant_id=tenant_id)
        grants = frozenset(
            Grant.objects.filter(members, tenant_id=tenant_id, revoked_at__isnull=True).values_list("id", flat=True)
        )
    return OAuthSettings(
        enabled=True,
        embedded=row.embedded_server,
        list_scope=row.list_scope,
        call_scope=row.call_scope,
        issuers=issuers,
        active_grants=grants,
    )
