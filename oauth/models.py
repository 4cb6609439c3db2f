"""OAuth settings of a tenant, the issuers it trusts, and the embedded authorization server's
state: signing keys, clients, consents (grants), authorization codes and refresh tokens.

Secrets are never stored in the clear: client secrets, codes and refresh tokens as SHA-256
hashes, the introspection secret of an external issuer and the private signing keys sealed
with ``TOOLBAY_SECRET_KEYS`` (``oauth.sealing``).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import models

from tenants.models import SCOPE_VALIDATOR, Tenant

DEFAULT_LIST_SCOPE = "tools:list"
DEFAULT_CALL_SCOPE = "tools:call"


def new_grant_id() -> str:
    return secrets.token_urlsafe(12)


class TenantOAuth(models.Model):
    """Whether a tenant's MCP endpoint takes OAuth access tokens, from whom, and which scopes
    its methods need. No row: OAuth is off (API keys only)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="oauth")
    enabled = models.BooleanField(
        default=False, help_text="Accept OAuth access tokens on the tenant's MCP endpoint (beside API keys)."
    )
    embedded_server = models.BooleanField(
        default=True,
        help_text="Toolbay's own authorization server signs the tenant's members in and issues tokens for it.",
    )
    registration_open = models.BooleanField(
        default=True,
        help_text="Let clients register themselves with the embedded server (RFC 7591) or by a client ID "
        "metadata document. Off: only clients an admin registered.",
    )
    list_scope = models.CharField(
        max_length=64,
        blank=True,
        default=DEFAULT_LIST_SCOPE,
        validators=[SCOPE_VALIDATOR],
        help_text="Scope a token needs for tools/list (empty: none).",
    )
    call_scope = models.CharField(
        max_length=64,
        blank=True,
        default=DEFAULT_CALL_SCOPE,
        validators=[SCOPE_VALIDATOR],
        help_text="Scope a token needs for tools/call and tasks (empty: none).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tenant OAuth settings"
        verbose_name_plural = "tenant OAuth settings"

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"OAuth {state} for {self.tenant_id and self.tenant.slug}"

    @property
    def scopes_supported(self) -> list[str]:
        return [scope for scope in dict.fromkeys((self.list_scope, self.call_scope)) if scope]


class TrustedIssuer(models.Model):
    """An external authorization server (Keycloak, Auth0, Entra ID, …) whose access tokens
    the tenant accepts."""

    class Validation(models.TextChoices):
        JWT = "jwt", "JWT signature (JWKS)"
        INTROSPECTION = "introspection", "Token introspection (RFC 7662)"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="trusted_issuers")
    issuer = models.URLField(max_length=500, help_text="The issuer identifier, exactly as tokens carry it in 'iss'.")
    enabled = models.BooleanField(default=True)
    advertise = models.BooleanField(
        default=True, help_text="List it in the tenant's Protected Resource Metadata, so clients sign in there."
    )
    validation = models.CharField(max_length=16, choices=Validation.choices, default=Validation.JWT)
    discovery = models.BooleanField(
        default=True,
        help_text="Find the JWKS and introspection endpoints in the issuer's metadata "
        "(/.well-known/openid-configuration, then RFC 8414).",
    )
    jwks_uri = models.URLField(max_length=500, blank=True, help_text="Overrides discovery.")
    introspection_endpoint = models.URLField(max_length=500, blank=True, help_text="Overrides discovery.")
    client_id = models.CharField(max_length=255, blank=True, help_text="Introspection credentials: client id.")
    client_secret_sealed = models.TextField(blank=True, editable=False)
    audience = models.CharField(
        max_length=500,
        blank=True,
        help_text="The audience tokens must name; empty: the tenant's MCP URL (RFC 8707). Entra ID: the "
        "application ID URI (api://…).",
    )
    subject_claim = models.CharField(max_length=100, default="sub", help_text="Claim (dotted path) of the subject.")
    groups_claim = models.CharField(
        max_length=100, default="groups", blank=True, help_text="Claim of the groups or roles, e.g. realm_access.roles."
    )
    scope_claim = models.CharField(max_length=100, default="scope", help_text="'scope' (RFC 9068) or 'scp' (Entra).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "issuer"]
        constraints = [models.UniqueConstraint(fields=["tenant", "issuer"], name="trustedissuer_unique_per_tenant")]

    def __str__(self) -> str:
        return f"{self.issuer} (trusted by {self.tenant.slug if self.tenant_id else '?'})"


class SigningKey(models.Model):
    """A key a tenant's embedded authorization server signs access tokens with (ES256).

    One key per tenant signs (``retired_at`` empty; a constraint keeps it to one, so two
    first token requests at the same moment cannot make two). A retired key no longer signs
    but stays published, and verifies, until the last token it signed has expired. Keys
    without a tenant are the shared keys of before per-tenant keys: retired, verifying old
    tokens on every tenant until they expire."""

    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="signing_keys")
    kid = models.CharField(max_length=64, unique=True)
    algorithm = models.CharField(max_length=16, default="ES256")
    public_jwk = models.JSONField()
    private_jwk_sealed = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(retired_at__isnull=True), name="signingkey_one_signing_per_tenant"
            )
        ]

    def __str__(self) -> str:
        return f"{self.algorithm} {self.kid}"


class OAuthClient(models.Model):
    """A client of a tenant's embedded authorization server."""

    class Kind(models.TextChoices):
        REGISTERED = "registered", "Registered itself (RFC 7591)"
        METADATA_DOCUMENT = "metadata_document", "Client ID metadata document"
        PREREGISTERED = "preregistered", "Registered by an admin"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="oauth_clients")
    client_id = models.CharField(max_length=500)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    client_name = models.CharField(max_length=200, blank=True)
    client_uri = models.URLField(max_length=500, blank=True)
    secret_hash = models.CharField(max_length=64, blank=True, editable=False)
    redirect_uris = models.JSONField(default=list)
    grant_types = models.JSONField(default=list)
    token_endpoint_auth_method = models.CharField(max_length=32, default="none")
    metadata = models.JSONField(default=dict, blank=True, help_text="The metadata the client registered with.")
    fetched_at = models.DateTimeField(null=True, blank=True, help_text="Metadata documents: when it was read.")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["tenant__slug", "client_name", "client_id"]
        constraints = [models.UniqueConstraint(fields=["tenant", "client_id"], name="oauthclient_unique_per_tenant")]

    def __str__(self) -> str:
        return f"{self.client_name or self.client_id} ({self.get_kind_display()})"

    @property
    def audit_oauth_identity(self) -> tuple[str, str]:
        return "", self.client_id


class Grant(models.Model):
    """A user's consent: this client may act for them on this tenant, with these scopes.

    Access tokens carry the grant's id; revoking the grant ends them (and its refresh
    tokens) at once.
    """

    id = models.CharField(primary_key=True, max_length=32, default=new_grant_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="oauth_grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oauth_grants")
    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE, related_name="grants")
    scope = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "revoked_at"], name="grant_tenant_active")]

    def __str__(self) -> str:
        return f"{self.client} for {self.user} on {self.tenant_id and self.tenant.slug}"

    @property
    def audit_oauth_identity(self) -> tuple[str, str]:
        return self.user.get_username(), self.client.client_id


class AuthorizationCode(models.Model):
    """A code stays (spent) after its redemption until it expires, so that a second
    redemption is recognised as a replay and ends the consent it was issued under."""

    code_hash = models.CharField(max_length=64, unique=True)
    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="codes")
    redirect_uri = models.CharField(max_length=2000)
    scope = models.CharField(max_length=500, blank=True)
    resource = models.CharField(max_length=500, blank=True)
    code_challenge = models.CharField(max_length=128)
    code_challenge_method = models.CharField(max_length=8, default="S256")
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"code for grant {self.grant_id}"


class RefreshToken(models.Model):
    token_hash = models.CharField(max_length=64, unique=True)
    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="refresh_tokens")
    scope = models.CharField(max_length=500, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"refresh token of grant {self.grant_id}"

    def describe(self) -> dict[str, Any]:
        return {"grant": self.grant_id, "scope": self.scope, "expires_at": self.expires_at.isoformat()}
