"""``manage.py add_provider NAME --tenant SLUG --issuer URL --client-id ID
--client-secret-env VAR [--scope S ...]``: register (or update) a connection provider.

The client secret is read from the environment variable named, never from the command
line (where it would sit in shell history and process lists). The last line of output is
the redirect URI to register at the provider, alone.
"""

from __future__ import annotations

import json
import os
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from mcp_platform.commands import AuditedCommand
from oauth.connections import client
from oauth.connections.services import provider_save, public_base, redirect_uri
from tenants.models import Tenant


class Command(AuditedCommand):
    help = "Register a per-user connection provider (OAuth 2.0 / OpenID Connect); prints the redirect URI last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The name tools use for it (a slug), e.g. github")
        parser.add_argument("--tenant", help="Tenant slug; omit for a platform provider")
        parser.add_argument("--issuer", default="", help="Issuer URL (endpoints are discovered from it)")
        parser.add_argument("--authorization-endpoint", default="")
        parser.add_argument("--token-endpoint", default="")
        parser.add_argument("--revocation-endpoint", default="")
        parser.add_argument("--userinfo-endpoint", default="")
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret-env", default="", help="Environment variable holding the client secret")
        parser.add_argument("--scope", action="append", default=[], help="A scope to ask for (repeat)")
        parser.add_argument("--no-pkce", action="store_true", help="For providers that reject PKCE")
        parser.add_argument("--auth-method", default="client_secret_basic", help="Token endpoint auth method")
        parser.add_argument("--param", action="append", default=[], help="Extra authorization parameter KEY=VALUE")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--base-url", default="", help="Toolbay's public URL (default TOOLBAY_PUBLIC_URL)")
        parser.add_argument("--no-check", action="store_true", help="Do not fetch the issuer's metadata now")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"No tenant {options['tenant']!r}")
        secret = None
        if options["client_secret_env"]:
            secret = os.environ.get(options["client_secret_env"])
            if not secret:
                raise CommandError(f"The environment variable {options['client_secret_env']} is not set or empty")
        extra: dict[str, str] = {}
        for pair in options["param"]:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise CommandError(f"--param {pair!r}: expected KEY=VALUE")
            extra[key] = value
        fields = {
            "display_name": options["display_name"],
            "issuer": options["issuer"],
            "authorization_endpoint": options["authorization_endpoint"],
            "token_endpoint": options["token_endpoint"],
            "revocation_endpoint": options["revocation_endpoint"],
            "userinfo_endpoint": options["userinfo_endpoint"],
            "client_id": options["client_id"],
            "token_endpoint_auth_method": options["auth_method"],
            "scopes": options["scope"],
            "pkce": not options["no_pkce"],
            "extra_authorize_params": extra,
        }
        if not options["issuer"] and not (options["authorization_endpoint"] and options["token_endpoint"]):
            raise CommandError("Give --issuer, or both --authorization-endpoint and --token-endpoint")
        try:
            provider = provider_save(tenant=tenant, name=options["name"], fields=fields, client_secret=secret)
        except (ValidationError, ValueError) as exc:
            messages = exc.message_dict if isinstance(exc, ValidationError) and hasattr(exc, "error_dict") else str(exc)
            raise CommandError(
                f"Invalid provider: {json.dumps(messages) if isinstance(messages, dict) else messages}"
            ) from None
        if not options["no_check"]:
            try:
                where = async_to_sync(client.endpoints)(provider)
            except client.ProviderError as exc:
                raise CommandError(f"Saved, but the provider's endpoints cannot be found: {exc}") from None
            self.stdout.write(f"Authorization endpoint: {where.authorization}")
            self.stdout.write(f"Token endpoint: {where.token}")
            self.stdout.write(f"Revocation endpoint: {where.revocation or '(none: disconnect cannot revoke)'}")
        owner = tenant.slug if tenant else "the platform"
        self.stdout.write(f"Provider {provider.name} saved for {owner}. Register this redirect URI at the provider:")
        self.stdout.write(redirect_uri(options["base_url"] or public_base(), provider))
