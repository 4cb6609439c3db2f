"""Installing a pack: its definitions as platform catalog entries, granted to one tenant."""

from __future__ import annotations

from django.db import transaction

from tenants.models import Tenant
from tools_app.catalog.definitions import Pack
from tools_app.catalog.models import AccessRule
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entry_install


@transaction.atomic
def pack_install(*, pack: Pack, tag: str, tenant: Tenant, note: str) -> None:
    """Create or update the pack's tools, resources, templates and prompts as platform entries
    tagged ``tag``, and grant ``tag:<tag>`` of every kind to ``tenant`` (idempotent: unchanged
    entries keep their version, existing grants are kept)."""
    for definition in pack.entries():
        catalog_entry_install(definition=definition, tags=[tag])
    for kind in (AccessRule.Kind.TOOL, AccessRule.Kind.RESOURCE, AccessRule.Kind.PROMPT):
        access_rule_grant_pattern(tenant=tenant, pattern=f"tag:{tag}", kind=kind, note=note)
