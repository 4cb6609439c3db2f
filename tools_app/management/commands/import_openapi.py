"""``manage.py import_openapi SOURCE --tenant SLUG ...``: one http tool per operation of an
OpenAPI document (a file, a URL, or ``-`` for stdin). Contract: each created, updated or
parked tool is one line of stdout (``created NAME  METHOD PATH`` / ``updated NAME  METHOD PATH
(fields)`` / ``parked NAME  METHOD PATH  (fields)``: its changed definition waits for approval;
``--approve`` updates instead); the rest goes to stderr; a document that cannot be used exits
non-zero naming the place."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from tenants.models import Tenant
from tools_app.imports.openapi.operations import Selection
from tools_app.imports.openapi.services import (
    DocumentProblem,
    ImportOptions,
    ImportPlan,
    OptionProblem,
    SecurityOptions,
    openapi_import,
    openapi_preview,
    read_source,
)


class Command(AuditedCommand):
    help = (
        "Import an OpenAPI 3.0/3.1 (or Swagger 2.0) document as http tools, one per operation. "
        "Prints one line per created, updated or parked tool; --dry-run prints what would happen."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", help="A file, an http(s) URL (fetched through the SSRF guard), or - for stdin.")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--tenant", help="The tenant whose private tools these become.")
        where.add_argument("--platform", action="store_true", help="Make platform tools instead.")
        parser.add_argument("--prefix", default="", help="Prepended to every tool name, e.g. petstore_.")
        parser.add_argument("--base-url", default="", help="Where the API is (default: the document's first server).")
        parser.add_argument("--include", nargs="+", default=[], metavar="OPERATION_ID", help="Only these operations.")
        parser.add_argument("--tag", nargs="+", default=[], help="Only operations with one of these OpenAPI tags.")
        parser.add_argument("--path", nargs="+", default=[], help="Only operations whose path matches a glob.")
        parser.add_argument("--label", nargs="+", default=[], help="Extra Toolbay tags on every tool.")
        parser.add_argument("--name", default="", help="The source's name (default: the prefix, else the title).")
        parser.add_argument(
            "--grant", action="store_true", help="Add an allow rule for the tenant on the tools of this source."
        )
        parser.add_argument(
            "--connection-provider",
            default="",
            metavar="NAME",
            help="The connection provider whose per-user tokens OAuth2 (authorization code) and OpenID Connect "
            "schemes use (default: the registered one whose endpoints match the document's).",
        )
        parser.add_argument(
            "--client-id",
            default="",
            help="The OAuth client ID of OAuth2 client-credentials schemes (the client secret goes into the "
            "vault as <source>-<scheme>).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Show what would happen; change nothing.")
        parser.add_argument(
            "--approve",
            action="store_true",
            help="Publish changed definitions of tools it made before (without it they wait for an admin's "
            "approval and clients keep the approved one).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No tenant with slug {options['tenant']!r}.")
        if options["grant"] and tenant is None:
            raise CommandError("--grant needs --tenant (platform tools are granted with access rules).")
        import_options = ImportOptions(
            prefix=options["prefix"],
            base_url=options["base_url"],
            selection=Selection(operation_ids=options["include"], tags=options["tag"], paths=options["path"]),
            tags=options["label"],
            name=options["name"],
            approve=options["approve"],
            security=SecurityOptions(
                connection_provider=options["connection_provider"], client_id=options["client_id"]
            ),
        )
        source_arg = options["source"]
        try:
            if source_arg == "-":
                source = read_source(text=sys.stdin.buffer.read())
            elif source_arg.startswith(("http://", "https://")):
                source = read_source(url=source_arg)
            else:
                source = read_source(path=source_arg)
            if options["dry_run"]:
                plan = openapi_preview(source=source, tenant=tenant, options=import_options)
            else:
                plan = openapi_import(source=source, tenant=tenant, options=import_options, grant=options["grant"])
        except DocumentProblem as exc:
            raise CommandError(str(exc)) from None
        except OptionProblem as exc:
            raise CommandError(f"--{exc.option.replace('_', '-')}: {exc}") from None
        self._report(plan, dry_run=options["dry_run"])

    def _report(self, plan: ImportPlan, *, dry_run: bool) -> None:
        verbs = {
            "create": "would create" if dry_run else "created",
            "update": "would update" if dry_run else "updated",
            "park": "would park" if dry_run else "parked",
        }
        for planned in plan.tools:
            if planned.action in verbs:
                changed = f"  ({', '.join(planned.changes)})" if planned.changes else ""
                self.stdout.write(f"{verbs[planned.action]} {planned.draft.name}  {planned.draft.operation}{changed}")
        for note in plan.notes:
            self.stderr.write(f"note: {note}")
        for skipped in plan.skipped:
            self.stderr.write(f"skipped {skipped.operation}: {skipped.reason}")
        for name in plan.missing:
            self.stderr.write(f"kept {name}: its operation is no longer imported")
        self.stderr.write(
            f"{plan.source_name}: {plan.count('create')} to create, {plan.count('update')} to update, "
            f"{plan.count('park')} waiting for approval, "
            f"{plan.count('unchanged')} unchanged, {len(plan.skipped)} skipped"
            + ("" if plan.document_changed else " (document unchanged)")
        )
