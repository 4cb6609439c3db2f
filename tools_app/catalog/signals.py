"""Fan-out: any write to a model that shapes a tenant's view of tools, resources and prompts
reports it; a static resource whose content changed is announced to its subscribers. And one
guard: a rule left without the API keys it was narrowed to is disabled (``_key_gone``).

Signals (not services) are the hook because changes arrive from the admin, the API,
management commands and shells alike; the work itself happens after commit in
``tools_app.changes``.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from django.dispatch import receiver

from tenants.models import ApiKey, Tenant
from tools_app.catalog.changes import catalog_changed, resource_updated
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool, ToolCuration
from tools_app.catalog.services import access_rules_disable_unnarrowed


@receiver([post_save, post_delete], sender=Tool)
@receiver([post_save, post_delete], sender=ResourceTemplate)
@receiver([post_save, post_delete], sender=Prompt)
def _entry_changed(instance: Tool | ResourceTemplate | Prompt, **_: Any) -> None:
    catalog_changed(instance.tenant_id)


@receiver([post_save, post_delete], sender=ToolCuration)
def _curation_changed(instance: ToolCuration, **_: Any) -> None:
    catalog_changed(instance.tenant_id)


@receiver([post_save, post_delete], sender=Resource)
def _resource_changed(instance: Resource, **_: Any) -> None:
    catalog_changed(instance.tenant_id)
    if getattr(instance, "_announce_update", False):
        instance._announce_update = False
        resource_updated(instance.uri, tenant_id=instance.tenant_id)


@receiver([post_save, post_delete], sender=AccessRule)
def _rule_changed(instance: AccessRule, **_: Any) -> None:
    catalog_changed(instance.tenant_id)


@receiver(m2m_changed, sender=AccessRule.api_keys.through)
def _rule_keys_changed(instance: AccessRule | ApiKey, **_: Any) -> None:
    # Either side of the relation may be the instance; both carry the tenant.
    catalog_changed(instance.tenant_id)


@receiver([post_save, post_delete], sender=ApiKey)
def _key_changed(instance: ApiKey, **_: Any) -> None:
    catalog_changed(instance.tenant_id)


# The one rule kept here rather than in a service: keys disappear by every path (the admin's
# delete page and bulk action, a tenant's deletion cascading, a shell), and a path that missed
# it would turn a rule narrowed to the key into a rule for every credential. Which rules named
# the key is only known before the delete; whether any narrowing is left, only after it (a bulk
# delete removes several keys of one rule).
@receiver(pre_delete, sender=ApiKey)
def _key_leaving(instance: ApiKey, **_: Any) -> None:
    instance._narrowed_rule_ids = list(instance.access_rules.values_list("pk", flat=True))  # type: ignore[attr-defined]


@receiver(post_delete, sender=ApiKey)
def _key_gone(instance: ApiKey, **_: Any) -> None:
    rule_ids = getattr(instance, "_narrowed_rule_ids", None)
    if rule_ids:
        access_rules_disable_unnarrowed(rule_ids=rule_ids)


@receiver([post_save, post_delete], sender=Tenant)
def _tenant_changed(instance: Tenant, **_: Any) -> None:
    # Reported as a change for everyone: a new tenant must clear "unknown slug" entries, and
    # a renamed or deleted one can no longer be found by its old slug. Tenants change rarely.
    catalog_changed(None)
