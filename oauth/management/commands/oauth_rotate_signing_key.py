"""``manage.py oauth_rotate_signing_key --tenant SLUG`` (or ``--all-tenants``): a new signing
key for a tenant's embedded authorization server. The key that signed until now stops
signing and stays published (verifying) until the last token it signed has expired."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from oauth.signing import rotate
from tenants.models import Tenant


class Command(AuditedCommand):
    help = (
        "Make a new signing key for a tenant's embedded authorization server (--tenant SLUG, or --all-tenants); "
        "the retiring key verifies until its tokens have expired."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--tenant", metavar="SLUG", help="The tenant whose key to rotate")
        which.add_argument("--all-tenants", action="store_true", help="Rotate every tenant's key")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["all_tenants"]:
            tenants = list(Tenant.objects.order_by("slug"))
        else:
            tenants = list(Tenant.objects.filter(slug=options["tenant"]))
            if not tenants:
                raise CommandError(f"No tenant {options['tenant']!r}")
        for tenant in tenants:
            key = rotate(tenant)
            self.stdout.write(f"{tenant.slug}: new signing key {key.kid} ({key.algorithm}).")
