"""Add an upstream MCP server for a tenant: one at a URL, or a packaged one (npm, PyPI, a command)
that Toolbay installs and runs; import its tools and print one line per published tool.

Contract (scripts rely on it): ``add_upstream NAME --tenant SLUG (--npm PKG[@VERSION] |
--pypi PKG[==VERSION] | --url URL | --command PROG [ARG ...] | --server-json FILE) [--arg A ...]
[--env K=V ...] [--secret-env K=SECRET ...] [--allow-host HOST ...] [--prefix P] [--publish-all]
[--grant] [--per-user] [--bearer-secret SECRET] [--user-credential JSON]``. Each published tool is
one stdout line: ``published NAME`` followed by
two spaces and the upstream's name of the tool. Anything else (install, discovery) goes to stderr.
A version left out is pinned to the newest one now. Exit status 1 with the reason on error; the
server stays registered (its install error shows in the admin) when only its start failed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from mcp_platform.commands import AuditedCommand
from tenants.models import Tenant
from tools_app.backends.models import BackendSecret
from tools_app.backends.packaged.install import InstallError, latest_version
from tools_app.backends.packaged.launch import install_server
from tools_app.backends.packaged.registry_json import RegistryProblem, read_server_json
from tools_app.backends.upstream.federation import UpstreamRefreshError, published_tools, upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.services import access_rule_grant_pattern


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise CommandError(f"{flag} takes NAME=VALUE, not {value!r}")
        pairs[key] = rest
    return pairs


class Command(AuditedCommand):
    help = (
        "Add an upstream MCP server (a URL, or an npm/PyPI package or command that Toolbay runs in a sandbox) "
        "for a tenant, import its tools and print one line per published tool."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The server's name in Toolbay (A-Z a-z 0-9 _ . -).")
        parser.add_argument("--tenant", required=True, help="The tenant whose private tools these become.")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--npm", metavar="PKG[@VERSION]", help="An npm package that speaks MCP over stdio.")
        source.add_argument("--pypi", metavar="PKG[==VERSION]", help="A PyPI package that speaks MCP over stdio.")
        source.add_argument("--url", help="A Streamable HTTP MCP server that already runs.")
        source.add_argument("--command", nargs="+", metavar="ARG", help="A program to run (platform operators).")
        source.add_argument("--server-json", metavar="FILE", help="A registry server.json (its first package).")
        parser.add_argument("--arg", action="append", default=[], help="An argument for the server (repeatable).")
        parser.add_argument("--env", action="append", default=[], help="K=V environment value (repeatable).")
        parser.add_argument(
            "--secret-env", action="append", default=[], help="K=SECRET: environment value from the tenant's secret."
        )
        parser.add_argument(
            "--allow-host", action="append", default=[], help="A host the server may reach (repeatable; default none)."
        )
        parser.add_argument("--prefix", default="", help="Prepended to the names of its tools, e.g. time.")
        parser.add_argument("--publish-all", action="store_true", help="Publish every tool it offers, now and later.")
        parser.add_argument("--grant", action="store_true", help="Allow the tenant to see and call its tools.")
        parser.add_argument("--per-user", action="store_true", help="One instance per user instead of per tenant.")
        parser.add_argument(
            "--bearer-secret",
            metavar="SECRET",
            help="The tenant's secret sent as a bearer token (a URL server): the service credential that lists "
            "its tools, and calls it unless --user-credential is given.",
        )
        parser.add_argument(
            "--user-credential",
            metavar="JSON",
            help='Calls send each user\'s own token: \'{"type": "connection", "provider": "P"}\' or '
            '\'{"type": "token_exchange", "provider": "P", "audience": "URL"}\'.',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"there is no tenant {options['tenant']!r}")
        fields = self._source(options)
        fields["args"] = [*fields.get("args", []), *options["arg"]]
        fields["env"] = {**fields.get("env", {}), **_pairs(options["env"], "--env")}
        fields["env_secrets"] = _pairs(options["secret_env"], "--secret-env")
        fields["allow_hosts"] = options["allow_host"]
        fields |= self._credentials(tenant, options)
        tag = f"mcp:{options['name']}"
        server = UpstreamServer(
            tenant=tenant,
            name=options["name"],
            tool_prefix=options["prefix"],
            tags=[tag],
            publish_new_tools=options["publish_all"],
            per_user=options["per_user"],
            **fields,
        )
        try:
            server.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        with transaction.atomic():
            server.save()
            if options["grant"]:
                access_rule_grant_pattern(tenant=tenant, pattern=f"tag:{tag}", note=f"add_upstream {server.name}")
        if server.packaged and server.kind != UpstreamServer.Kind.COMMAND:
            self.stderr.write(f"installing {server.package} {server.version} ...")
            try:
                done = install_server(server)
            except InstallError as exc:
                raise CommandError(f"the install failed (recorded on the server): {exc}") from None
            self.stderr.write(f"installed ({done.integrity})")
        try:
            report = upstream_refresh(upstream_id=server.pk)
        except UpstreamRefreshError as exc:
            raise CommandError(f"{server.name} was added but its tools could not be listed: {exc}") from None
        for note in report.notes:
            self.stderr.write(note)
        for tool in published_tools(server).order_by("name"):
            self.stdout.write(f"published {tool.name}  {tool.backend_config.get('tool')}")
        if report.unpublished:
            self.stderr.write(f"offered but not published (publish in the admin): {', '.join(report.unpublished)}")

    def _credentials(self, tenant: Tenant, options: dict[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if options["bearer_secret"]:
            secret = BackendSecret.objects.filter(tenant=tenant, name=options["bearer_secret"]).first()
            if secret is None:
                raise CommandError(f"the tenant has no secret named {options['bearer_secret']!r}")
            fields |= {"auth": UpstreamServer.Auth.BEARER, "secret": secret}
        if options["user_credential"]:
            try:
                fields["user_credential"] = json.loads(options["user_credential"])
            except ValueError as exc:
                raise CommandError(f"--user-credential is not JSON: {exc}") from None
        return fields

    def _source(self, options: dict[str, Any]) -> dict[str, Any]:
        try:
            if options["npm"]:
                spec = options["npm"]
                # "@scope/name@1.2.3": the version is after the last "@" that is not the first character.
                at = spec.rfind("@")
                package, version = (spec[:at], spec[at + 1 :]) if at > 0 else (spec, "")
                return {"kind": "npm", "package": package, "version": version or latest_version("npm", package)}
            if options["pypi"]:
                package, _, version = options["pypi"].partition("==")
                if re.search(r"[<>~!=]", package):
                    raise CommandError("pin a PyPI version with ==, e.g. mcp-server-time==2026.10.19")
                return {"kind": "pypi", "package": package, "version": version or latest_version("pypi", package)}
        except InstallError as exc:
            raise CommandError(str(exc)) from None
        if options["url"]:
            return {"kind": "http", "url": options["url"]}
        if options["command"]:
            return {"kind": "command", "command": options["command"]}
        try:
            entry = read_server_json(json.loads(Path(options["server_json"]).read_text()))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {options['server_json']}: {exc}") from None
        except RegistryProblem as exc:
            raise CommandError(str(exc)) from None
        given = {pair.partition("=")[0] for pair in [*options["env"], *options["secret_env"]]}
        missing = [name for name in entry.required_variables if name not in given]
        if missing:
            raise CommandError(f"the server needs {', '.join(missing)}: pass --env or --secret-env for each")
        return entry.fields
