"""Tenants, who belongs to them (memberships and roles) and their MCP API keys (hashed)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

SCOPE_VALIDATOR = RegexValidator(r"^[A-Za-z0-9_.:-]{1,64}$", "Scopes are 1-64 characters of A-Z a-z 0-9 _ . : -")


class ToolListing(models.TextChoices):
    """How an endpoint answers tools/list: every visible tool, or a search tool (for catalogs of
    hundreds of tools) plus the tools pinned as always visible."""

    LIST = "list", "List every visible tool"
    SEARCH = "search", "Search: list a search tool and the always-visible tools"


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True, help_text="Used in the endpoint URL: /mcp/<slug>")
    name = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True, help_text="Inactive tenants answer 404 everywhere.")
    allow_anonymous = models.BooleanField(
        default=False,
        help_text="Let clients without an API key connect (a public tool catalog).",
    )
    api_keys_enabled = models.BooleanField(
        default=True,
        help_text="Accept API keys on the MCP endpoint. Turn off to admit OAuth access tokens only.",
    )
    calls_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Upper bound on tools/call per minute; empty for no limit."
    )
    max_concurrent_calls = models.PositiveIntegerField(
        null=True, blank=True, help_text="Upper bound on calls running at once; empty for no limit."
    )
    tool_listing = models.CharField(
        max_length=8,
        choices=ToolListing.choices,
        default=ToolListing.LIST,
        help_text="Search suits catalogs too large to list: clients find tools with the search tool and call "
        "them by name. An API key may override it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        OPERATOR = "operator", "Operator"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class ApiKey(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    scopes = models.JSONField(default=list, blank=True, help_text='List of scope strings, e.g. ["tools:read"].')
    expires_at = models.DateTimeField(null=True, blank=True)
    tool_listing = models.CharField(
        max_length=8,
        choices=ToolListing.choices,
        blank=True,
        help_text="How tools/list answers this key; empty: as the tenant's setting says.",
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="apikey_unique_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
