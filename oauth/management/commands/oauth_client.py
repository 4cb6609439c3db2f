"""``manage.py oauth_client <tenant> --name … --redirect-uri …``: pre-register a client with the
tenant's embedded authorization server. The client id is printed alone on the last line (and,
for a confidential client, the secret on the line before it, shown once)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from oauth.server.clients import ClientMetadataError
from oauth.services import client_preregister
from tenants.models import Tenant


class Command(AuditedCommand):
    help = "Pre-register an OAuth client with a tenant's embedded authorization server."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="Tenant slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--redirect-uri", action="append", required=True, dest="redirect_uris")
        parser.add_argument("--confidential", action="store_true", help="Give it a secret (client_secret_basic)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant {options['tenant']!r}")
        try:
            client, secret = client_preregister(
                tenant=tenant,
                name=options["name"],
                redirect_uris=options["redirect_uris"],
                public=not options["confidential"],
            )
        except ClientMetadataError as exc:
            raise CommandError(str(exc)) from None
        if secret is not None:
            self.stdout.write(f"client secret (shown once): {secret}")
        self.stdout.write(client.client_id)
