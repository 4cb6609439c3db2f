"""``manage.py seed_demo``: the demo tenant, its tools, resources and prompts, and the admin
user (idempotent). It makes no anonymous tenant: the conformance suite's tenant comes from
``python -m conformance.seed``, outside the product."""

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from mcp_platform.commands import AuditedCommand
from tenants.models import Membership, Tenant
from tenants.services import membership_set
from tools_app.packs import demo as demo_pack
from tools_app.packs.install import pack_install

ADMIN_USERNAME = "admin"
PASSWORD_ENV = "TOOLBAY_ADMIN_PASSWORD"


class Command(AuditedCommand):
    help = (
        "Install the demo pack (tools, resources, prompts), the tenant 'demo' with its grants, and an "
        f"admin user. Safe to run again. The admin password comes from "
        f"${PASSWORD_ENV}, or is generated and printed once."
    )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        demo, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
        pack_install(pack=demo_pack.PACK, tag="demo", tenant=demo, note="seed_demo: the demo pack")
        self.stdout.write("Pack installed: demo (tenant 'demo').")
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
