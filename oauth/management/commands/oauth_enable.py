"""``manage.py oauth_enable <tenant>``: turn OAuth on for a tenant's MCP endpoint, with the
embedded authorization server (``--no-embedded`` for external issuers only)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from oauth.services import oauth_settings_set
from tenants.models import Tenant


class Command(AuditedCommand):
    help = "Turn OAuth on for a tenant (embedded authorization server unless --no-embedded)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="Tenant slug")
        parser.add_argument("--no-embedded", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}")
        oauth_settings_set(tenant=tenant, changes={"enabled": True, "embedded_server": not options["no_embedded"]})
        self.stdout.write(f"OAuth is on for {tenant.slug}.")
