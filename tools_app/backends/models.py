"""Encrypted backend secrets, and what every backend model shares (tenant ownership, names).

Registered with Django through ``tools_app.models``; upstream MCP servers have their own
module (``tools_app.backends.upstream.models``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from tenants.models import Tenant
from tools_app.catalog.models import unique_per_catalog


def owned_by(tenant_id: int | None) -> Q:
    """Rows of exactly this tenant (None: the platform's own)."""
    return Q(tenant__isnull=True) if tenant_id is None else Q(tenant_id=tenant_id)


def named(obj: Any) -> str:
    """ "name (tenant)" without a query: str() also runs while a tenant is being deleted
    (audit records deletions), when its row may already be gone."""
    if obj.tenant_id is None:
        return f"{obj.name}"
    field = type(obj)._meta.get_field("tenant")
    tenant = field.get_cached_value(obj) if field.is_cached(obj) else f"tenant {obj.tenant_id}"
    return f"{obj.name} ({tenant})"


NAME_VALIDATOR = RegexValidator(r"^[A-Za-z0-9_.-]{1,100}$", "Names are 1-100 characters of A-Z a-z 0-9 _ . -")


class BackendSecret(models.Model):
    """A credential a backend sends (API token, password), stored encrypted.

    The plaintext is never stored, shown, logged or returned: ``ciphertext`` is a Fernet
    token under ``TOOLBAY_SECRET_KEYS`` and only ``tools_app.backends.vault`` opens it, when a
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
        constraints = unique_per_catalog("name")

    def __str__(self) -> str:
        return named(self)

    def __repr__(self) -> str:
        # Never the ciphertext either: it is useless without the key, but it has no business in logs.
        return f"<BackendSecret {self.pk} {self.name!r}>"
