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


# --- per-user connections to outside APIs (the client side) ------------------------------


def new_attempt_id() -> str:
    return secrets.token_urlsafe(24)


class ConnectionProvider(models.Model):
    """An OAuth 2.0 / OpenID Connect provider whose APIs tools call as each user: GitHub,
    Google, a company's own server. Each user grants Toolbay access once (a ``Connection``).

    Endpoints come from the issuer's metadata (OIDC discovery, then RFC 8414) unless given.
    The client secret is sealed with ``TOOLBAY_SECRET_KEYS``."""

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="connection_providers",
        help_text="Empty: a platform provider every tenant's tools may use.",
    )
    name = models.SlugField(max_length=64, help_text="What tools name it by, and part of the redirect URI.")
    display_name = models.CharField(max_length=200, blank=True)
    issuer = models.URLField(max_length=500, blank=True, help_text="Used for discovery when endpoints are empty.")
    authorization_endpoint = models.URLField(max_length=500, blank=True)
    token_endpoint = models.URLField(max_length=500, blank=True)
    revocation_endpoint = models.URLField(max_length=500, blank=True)
    userinfo_endpoint = models.URLField(max_length=500, blank=True)
    client_id = models.CharField(max_length=255)
    client_secret_sealed = models.TextField(blank=True, editable=False)
    token_endpoint_auth_method = models.CharField(
        max_length=32,
        default="client_secret_basic",
        choices=[(m, m) for m in ("client_secret_basic", "client_secret_post", "none")],
    )
    scopes = models.JSONField(default=list, blank=True, help_text='Scopes every connection asks for, e.g. ["repo"].')
    pkce = models.BooleanField(default=True, help_text="Use PKCE (S256).")
    extra_authorize_params = models.JSONField(
        default=dict, blank=True, help_text='Extra authorization request parameters, e.g. {"access_type": "offline"}.'
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="connectionprovider_unique_per_tenant"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(tenant__isnull=True), name="connectionprovider_unique_platform"
            ),
        ]

    def __str__(self) -> str:
        owner = self.tenant.slug if self.tenant is not None else "platform"
        return f"{self.display_name or self.name} ({owner})"


class Connection(models.Model):
    """One user's grant at one provider: the MCP principal (its ``subject``) and provider.

    Tokens are sealed; ``expires_at`` is the access token's expiry (None: unknown)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="connections")
    provider = models.ForeignKey(ConnectionProvider, on_delete=models.CASCADE, related_name="connections")
    subject = models.CharField(max_length=80, help_text="The principal's stable subject (tenants.principal).")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="connections"
    )
    label = models.CharField(max_length=200, blank=True, help_text="Who connected, as the audit log names them.")
    account = models.CharField(max_length=255, blank=True, help_text="The account at the provider (its 'sub').")
    access_token_sealed = models.TextField(editable=False)
    refresh_token_sealed = models.TextField(blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "subject"], name="connection_one_per_subject_and_provider")
        ]

    def __str__(self) -> str:
        return f"{self.label or self.subject} → {self.provider.name}"

    @property
    def audit_oauth_identity(self) -> tuple[str, str]:
        return self.account, self.provider.name


class ConnectAttempt(models.Model):
    """A connect link a tool call handed out: bound to the principal that needs it, to the
    Toolbay user who must complete it (when the principal has one), then to the browser
    session that started it; used once, and only until ``expires_at``."""

    id = models.CharField(primary_key=True, max_length=40, default=new_attempt_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    provider = models.ForeignKey(ConnectionProvider, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=80)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    label = models.CharField(max_length=200, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=64, blank=True, db_index=True)
    code_verifier_sealed = models.TextField(blank=True)
    session_key = models.CharField(max_length=64, blank=True)
    # The MCP session (2025-11-25) that was sent the link: told with
    # notifications/elicitation/complete once the connection is stored.
    mcp_session_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["provider", "subject"], name="connectattempt_subject")]

    def __str__(self) -> str:
        return f"connect {self.provider_id} for {self.label or self.subject}"
