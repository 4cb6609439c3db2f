"""Upstream MCP servers: another MCP server whose tools Toolbay imports and proxies."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from tenants.models import Tenant
from tools_app.backends.models import NAME_VALIDATOR, BackendSecret, named
from tools_app.catalog.models import unique_per_catalog
from tools_app.catalog.validation import check_string_list


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
    auto_approve = models.BooleanField(
        default=False,
        help_text="Trust this server: a refresh that changes a published tool's title, description, schemas, "
        "annotations or icons applies the change at once. Off: the change waits for an admin's approval "
        "(Pending definitions) and clients keep the approved definition.",
    )
    timeout_seconds = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Default timeout of imported tools.",
    )
    import_resources_and_prompts = models.BooleanField(
        default=False,
        help_text="Mirror the upstream's resources, resource templates and prompts on every refresh (named with "
        "the prefix, tagged with the tags; grant them with access rules of their kind).",
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
        constraints = unique_per_catalog("name")

    def __str__(self) -> str:
        return named(self)

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
        try:
            check_string_list(self.tags, what="Tags")
        except ValidationError as exc:
            errors["tags"] = exc.messages
        if errors:
            raise ValidationError(errors)
