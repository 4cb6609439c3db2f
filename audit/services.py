"""Writes to the audit log."""
# An audited model may define ``audit_oauth_identity``: the (OAuth subject, client id) its
# changes concern; the change audit records and filters by them.

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

from django.db.models import Model

from audit.models import AuditEvent
from audit.redaction import REDACTED, is_secret_field
from mcp_platform.actors import current_actor
from tenants.models import Tenant


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return REDACTED
    return value


def snapshot(instance: Model) -> dict[str, Any]:
    """The instance's concrete fields as JSON values, secrets redacted."""
    values = {}
    for field in instance._meta.concrete_fields:
        name = field.attname
        value = field.value_from_object(instance)
        if hasattr(value, "resolve_expression"):  # e.g. version = F("version") + 1, just saved
            value = type(instance)._default_manager.filter(pk=instance.pk).values_list(name, flat=True).first()
        values[name] = REDACTED if is_secret_field(name) else _plain(value)
    return values


def _tenant_of(instance: Model) -> Tenant | None:
    if isinstance(instance, Tenant):
        return instance
    tenant_id = getattr(instance, "tenant_id", None)
    return Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None


def _event(instance: Model, action: str, changes: dict[str, Any], tenant: Tenant | None, actor: Any) -> AuditEvent:
    # OAuth objects (a consent, a registered client) say which subject and client they concern.
    oauth_subject, oauth_client = getattr(instance, "audit_oauth_identity", ("", ""))
    return AuditEvent(
        oauth_subject=oauth_subject[:255],
        oauth_client=oauth_client[:255],
        tenant_id=tenant.pk if tenant else None,
        tenant_slug=tenant.slug if tenant else "",
        actor_user=actor.user(),
        actor_label=actor.describe(),
        source=actor.source,
        action=action,
        object_type=instance._meta.label,
        object_id=str(instance.pk),
        object_repr=str(instance)[:300],
        changes=changes,
    )


def audit_created_many(instances: list[Model], *, tenant: Tenant | None) -> list[AuditEvent]:
    """Record the creation of ``instances`` (all of ``tenant``, or platform objects when None)
    in one INSERT: for a service that created them with ``bulk_create``, which sends no signals.
    Each gets the same row ``audit_change`` would have written."""
    actor = current_actor()
    events = [
        _event(instance, "created", {k: [None, v] for k, v in snapshot(instance).items()}, tenant, actor)
        for instance in instances
    ]
    return AuditEvent.objects.bulk_create(events, batch_size=500)


def audit_change(
    instance: Model,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    extra: dict[str, Any] | None = None,
) -> AuditEvent | None:
    """Record one change. Updates that changed nothing are not recorded."""
    if action == "updated" and before is not None and after is not None:
        changes = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v and k != "updated_at"}
    elif action == "created":
        changes = {k: [None, v] for k, v in (after or {}).items()}
    elif action == "deleted":
        changes = {k: [v, None] for k, v in (before or {}).items()}
    else:
        changes = {}
    changes.update(extra or {})
    if action == "updated" and not changes:
        return None
    event = _event(instance, action, changes, _tenant_of(instance), current_actor())
    event.save()
    return event
