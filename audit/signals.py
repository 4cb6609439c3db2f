"""Change audit: one AuditEvent per create, update or delete of the tracked models, with a
field-level diff, written in the same transaction as the change (so neither exists
without the other). Signals only collect; the diff and the row come from audit.services."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db.models import Model
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from audit.services import audit_change, snapshot

# app_label.ModelName of everything an operator needs to see changes of.
TRACKED = [
    "tenants.Tenant",
    "tenants.Membership",
    "tenants.ApiKey",
    "tools_app.Tool",
    "tools_app.ToolCuration",
    "tools_app.Resource",
    "tools_app.ResourceTemplate",
    "tools_app.Prompt",
    "tools_app.AccessRule",
    "tools_app.PendingDefinition",
    "tools_app.BackendSecret",
    "tools_app.UpstreamServer",
    "api.PersonalAccessToken",
    "oauth.TenantOAuth",
    "oauth.TrustedIssuer",
    "oauth.OAuthClient",
    "oauth.Grant",
]


def _before(sender: type[Model], instance: Model, raw: bool = False, **_: Any) -> None:
    if raw or instance.pk is None:
        instance._audit_before = None  # type: ignore[attr-defined]
        return
    current = sender._default_manager.filter(pk=instance.pk).first()
    instance._audit_before = snapshot(current) if current is not None else None  # type: ignore[attr-defined]


def _after(sender: type[Model], instance: Model, created: bool, raw: bool = False, **_: Any) -> None:
    if raw:
        return
    before = None if created else getattr(instance, "_audit_before", None)
    audit_change(instance, "created" if created else "updated", before, snapshot(instance))


def _deleted(sender: type[Model], instance: Model, **_: Any) -> None:
    audit_change(instance, "deleted", snapshot(instance), None)


def _rule_keys(sender: Any, instance: Model, action: str, pk_set: set[int] | None, **_: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        audit_change(
            instance, "updated", None, None, extra={"api_keys": [action.removeprefix("post_"), sorted(pk_set or [])]}
        )


for label in TRACKED:
    try:
        model = apps.get_model(label)
    except LookupError:  # an optional app or a model that does not exist (yet)
        continue
    pre_save.connect(_before, sender=model, weak=False, dispatch_uid=f"audit-pre-{label}")
    post_save.connect(_after, sender=model, weak=False, dispatch_uid=f"audit-post-{label}")
    post_delete.connect(_deleted, sender=model, weak=False, dispatch_uid=f"audit-del-{label}")

m2m_changed.connect(
    _rule_keys,
    sender=apps.get_model("tools_app.AccessRule").api_keys.through,
    weak=False,
    dispatch_uid="audit-rule-keys",
)
