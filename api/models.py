"""The REST API's own table: personal access tokens (``tbp_…``) for scripts."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone


class PersonalAccessToken(models.Model):
    """A credential for scripts calling the REST API as a user.

    Distinct from MCP API keys (``tenants.ApiKey``): a token acts with its user's
    memberships, never reaches ``/mcp/``, and a raw token starts with ``tbp_`` where an API
    key starts with ``tbk_``. Stored the same way: a lookup prefix and a SHA-256 of the
    whole token.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="accesstoken_unique_name_per_user")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
