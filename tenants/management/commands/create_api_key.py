"""``manage.py create_api_key <tenant> --name <name>``: the raw key alone on the last line."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from mcp_platform.commands import AuditedCommand
from tenants.models import Tenant, ToolListing
from tenants.services import api_key_create


class Command(AuditedCommand):
    help = "Create an API key for a tenant. The raw key is printed alone on the last line, once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="The tenant's slug.")
        parser.add_argument("--name", required=True)
        parser.add_argument("--scopes", nargs="*", default=[], help="Scope strings, e.g. tools:read")
        parser.add_argument("--expires-at", help="ISO 8601 date-time, e.g. 2027-01-01T00:00:00Z")
        parser.add_argument(
            "--tool-listing",
            choices=ToolListing.values,
            default="",
            help="How tools/list answers this key (list or search); default: as its tenant says.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["slug"]).first()
        if tenant is None:
            raise CommandError(f"No tenant with slug {options['slug']!r}.")
        expires_at = None
        if options["expires_at"]:
            expires_at = parse_datetime(options["expires_at"])
            if expires_at is None or expires_at.tzinfo is None:
                raise CommandError(
                    "--expires-at must be an ISO 8601 date-time with a time zone, e.g. 2027-01-01T00:00:00Z"
                )
        try:
            key, raw = api_key_create(
                tenant=tenant,
                name=options["name"],
                scopes=options["scopes"],
                expires_at=expires_at,
                tool_listing=options["tool_listing"],
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        self.stdout.write(
            f"Created API key {key.name!r} for {tenant.slug} (prefix {key.prefix}). It is shown only now:"
        )
        self.stdout.write(raw)
