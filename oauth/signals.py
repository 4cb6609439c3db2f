"""Fan-out only: whatever changes what an OAuth token may do on a tenant moves the tenant's
generation (``tools_app.catalog.changes``), so every process reloads its OAuth snapshot on
the next request and open streams re-check their credential (a revoked consent ends its
sessions)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from oauth.models import Grant, SigningKey, TenantOAuth, TrustedIssuer
from tenants.models import Membership
from tools_app.catalog.changes import catalog_changed


@receiver([post_save, post_delete], sender=TenantOAuth)
@receiver([post_save, post_delete], sender=TrustedIssuer)
@receiver([post_save, post_delete], sender=Grant)
@receiver(post_save, sender=SigningKey)  # a first key or a rotation: every process reloads the keys
@receiver([post_save, post_delete], sender=Membership)
def _tenant_oauth_changed(instance: Any, **_: Any) -> None:
    catalog_changed(instance.tenant_id)


@receiver(post_save, sender=get_user_model())
def _user_changed(instance: Any, created: bool = False, update_fields: Any = None, **_: Any) -> None:
    # A deactivated user's tokens stop working; logins (last_login) change nothing.
    if created or (update_fields is not None and set(update_fields) <= {"last_login", "password"}):
        return
    for tenant_id in Membership.objects.filter(user=instance).values_list("tenant_id", flat=True):
        catalog_changed(tenant_id)
