"""``manage.py create_tenant <slug> --name <name> [--allow-anonymous] [--tool-listing list|search]``."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from tenants.models import ToolListing
from tenants.services import tenant_create


class Command(AuditedCommand):
    help = "Create a tenant; its MCP endpoint is /mcp/<SLUG>."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--allow-anonymous", action="store_true", help="Serve clients without an API key.")
        parser.add_argument(
            "--tool-listing",
            choices=ToolListing.values,
            default=ToolListing.LIST,
            help="search: tools/list shows a search tool and the always-visible tools (large catalogs).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = tenant_create(
                slug=options["slug"],
                name=options["name"],
                allow_anonymous=options["allow_anonymous"],
                tool_listing=options["tool_listing"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}); endpoint /mcp/{tenant.slug}")
