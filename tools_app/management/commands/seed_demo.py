"""``manage.py seed_demo``: the demo and conformance tenants, their tools, resources and
prompts, and the admin user (idempotent)."""

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from mcp_platform.commands import AuditedCommand
from tenants.models import Membership, Tenant
from tenants.services import membership_set
from tools_app.catalog.models import AccessRule
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entry_install
from tools_app.packs import PACKS

ADMIN_USERNAME = "admin"
PASSWORD_ENV = "TOOLBAY_ADMIN_PASSWORD"


class Command(AuditedCommand):
    help = (
        "Install the demo and conformance packs (tools, resources, prompts), the tenants 'demo' and "
        "'conformance' (public) "
        f"with their grants, and an admin user. Safe to run again. The admin password comes from "
        f"${PASSWORD_ENV}, or is generated and printed once."
    )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        demo, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
        conformance, _ = Tenant.objects.get_or_create(
            slug="conformance", defaults={"name": "MCP conformance suite", "allow_anonymous": True}
        )
        for name, tenant in (("demo", demo), ("conformance", conformance)):
            pack = PACKS[name]
            for definition in pack.entries():
                catalog_entry_install(definition=definition, tags=[name])
            for kind in (AccessRule.Kind.TOOL, AccessRule.Kind.RESOURCE, AccessRule.Kind.PROMPT):
                access_rule_grant_pattern(
                    tenant=tenant, pattern=f"tag:{name}", kind=kind, note=f"seed_demo: the {name} pack"
                )
        self.stdout.write("Packs installed: demo (tenant 'demo'), conformance (tenant 'conformance', public).")
        self._ensure_admin(demo)

    def _ensure_admin(self, demo: Tenant) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=ADMIN_USERNAME).first()
        password = os.environ.get(PASSWORD_ENV)
        if user is None:
            generated = password is None
            password = password or secrets.token_urlsafe(12)
            user = user_model.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
            source = "generated, shown only now" if generated else f"from ${PASSWORD_ENV}"
            self.stdout.write(f"Admin user '{ADMIN_USERNAME}' created; password ({source}): {password}")
        elif password:
            user.set_password(password)
            user.save(update_fields=["password"])
            self.stdout.write(f"Admin user '{ADMIN_USERNAME}' password set from ${PASSWORD_ENV}.")
        else:
            self.stdout.write(f"Admin user '{ADMIN_USERNAME}' exists; password unchanged.")
        membership_set(tenant=demo, user=user, role=Membership.Role.OWNER)
