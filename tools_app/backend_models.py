"""Models of the code-free backends: encrypted secrets and upstream MCP servers.

Imported by ``tools_app.models`` so Django registers them with the app.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from tenants.models import Tenant
from tools_app.backend_cache import backend_state_changed


def owned_by(tenant_id: int | None) -> Q:
    """Rows of exactly this tenant (None: the platform's own)."""
    return Q(tenant__isnull=True) if tenant_id is None else Q(tenant_id=tenant_id)


def _named(obj: BackendSecret | UpstreamServer) -> str:
    """ "name (tenant)" without a query: str() also runs while a tenant is being deleted
    (audit records deletions), when its row may already be gone."""
    if obj.tenant_id is None:
        return obj.name
    field = type(obj)._meta.get_field("tenant")
    tenant = field.get_cached_value(obj) if field.is_cached(obj) else f"tenant {obj.tenant_id}"  # type: ignore[attr-defined]
    return f"{obj.name} ({tenant})"


NAME_VALIDATOR = RegexValidator(r"^[A-Za-z0-9_.-]{1,100}$", "Names are 1-100 characters of A-Z a-z 0-9 _ . -")


class BackendSecret(models.Model):
    """A credential a backend sends (API token, password), stored encrypted.

    The plaintext is never stored, shown, logged or returned: ``ciphertext`` is a Fernet
    token under ``TOOLBAY_SECRET_KEYS`` and only ``tools_app.vault`` opens it, when a
    backend needs it. Backends refer to secrets by name; a tool or upstream uses secrets
    of its own tenant only (platform ones use platform secrets). A change record (audit)
    of this model must leave ``ciphertext`` out and say only that the value changed.
    """

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="backend_secrets",
        help_text="Empty: a platform secret, usable by platform tools. Set: usable by that tenant's tools.",
    )
    name = models.CharField(max_length=100, validators=[NAME_VALIDATOR], help_text="What backend settings refer to.")
    description = models.CharField(max_length=200, blank=True)
    ciphertext = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="backendsecret_unique_platform_name"
            ),
            models.UniqueConstraint(fields=["tenant", "name"], name="backendsecret_unique_tenant_name"),
        ]

    def __str__(self) -> str:
        return _named(self)

    def __repr__(self) -> str:
        # Never the ciphertext either: it is useless without the key, but it has no business in logs.
        return f"<BackendSecret {self.pk} {self.name!r}>"


class UpstreamServer(models.Model):
    """Another MCP server (Streamable HTTP) whose tools Toolbay imports and proxies."""

    class Auth(models.TextChoices):
        NONE = "none", "None"
        BEARER = "bearer", "Bearer token (Authorization: Bearer <secret>)"
        HEADER = "header", "Custom header (<header>: <secret>)"

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="upstream_servers",
        help_text="Empty: imported tools are platform tools. Set: they are private to that tenant.",
    )
    name = models.CharField(max_length=100, validators=[NAME_VALIDATOR])
    url = models.URLField(max_length=500, help_text="The server's Streamable HTTP endpoint, e.g. https://host/mcp.")
    auth = models.CharField(max_length=16, choices=Auth.choices, default=Auth.NONE)
    auth_header = models.CharField(
        max_length=100, blank=True, help_text="For a custom header: its name, e.g. X-Api-Key."
    )
    secret = models.ForeignKey(
        BackendSecret,
        null=True,
        blank=True,
        on_delete=models.RESTRICT,  # a tenant deleted takes both; a secret alone may not go
        related_name="upstream_servers",
        help_text="The credential, from the secrets of the same tenant.",
    )
    tool_prefix = models.CharField(
        max_length=40,
        blank=True,
        validators=[RegexValidator(r"^[A-Za-z0-9_.-]*$", "A prefix is made of A-Z a-z 0-9 _ . -")],
        help_text="Prepended to the names of tools imported from now on, e.g. 'github.'.",
    )
    tags = models.JSONField(default=list, blank=True, help_text="Tags given to tools imported from now on.")
    publish_new_tools = models.BooleanField(
        default=False,
        help_text="Publish tools the upstream adds as soon as a refresh sees them. Off: new tools wait "
        "until you publish them.",
    )
    timeout_seconds = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Default timeout of imported tools.",
    )
    enabled = models.BooleanField(default=True, help_text="Disabled: calls fail and nobody listens for changes.")
    discovered_tools = models.JSONField(default=list, blank=True, editable=False)
    server_info = models.JSONField(default=dict, blank=True, editable=False)
    refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="upstreamserver_unique_platform_name"
            ),
            models.UniqueConstraint(fields=["tenant", "name"], name="upstreamserver_unique_tenant_name"),
        ]

    def __str__(self) -> str:
        return _named(self)

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        if self.url and not self.url.lower().startswith(("http://", "https://")):
            errors["url"] = "Use an http:// or https:// URL."
        if self.auth != self.Auth.NONE and self.secret_id is None:
            errors["secret"] = "Choose the secret this authentication sends."
        if self.auth == self.Auth.HEADER and not self.auth_header.strip():
            errors["auth_header"] = "Name the header that carries the secret."
        if self.secret_id is not None and self.secret is not None and self.secret.tenant_id != self.tenant_id:
            errors["secret"] = "Use a secret of the same tenant (or a platform secret for a platform server)."
        from tools_app.validation import check_string_list

        try:
            check_string_list(self.tags, what="Tags")
        except ValidationError as exc:
            errors["tags"] = exc.messages
        if errors:
            raise ValidationError(errors)


@receiver([post_save, post_delete], sender=BackendSecret)
@receiver([post_save, post_delete], sender=UpstreamServer)
def _backend_state_changed(**_: Any) -> None:
    # Fan-out only: caches of secrets and upstream settings reload after commit.
    backend_state_changed()
