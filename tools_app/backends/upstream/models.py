"""Upstream MCP servers: another MCP server whose tools Toolbay imports and proxies."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from tenants.models import Tenant
from tools_app.backends.base import BackendConfigError
from tools_app.backends.connections import UserCredential
from tools_app.backends.models import NAME_VALIDATOR, BackendSecret, named, owned_by
from tools_app.catalog.models import unique_per_catalog
from tools_app.catalog.validation import check_string_list

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
# npm names (scoped or not) and PyPI names; exact versions only (a range would not pin).
PACKAGE_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[A-Za-z0-9][A-Za-z0-9._~-]{0,213}$")
EXACT_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,99}$")
HOST_PATTERN = re.compile(r"^(\*\.)?[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$")


class UpstreamServer(models.Model):
    """Another MCP server whose tools Toolbay imports and proxies: one that already runs and
    speaks Streamable HTTP (``kind`` http), or a packaged stdio server Toolbay installs and runs
    itself in a sandbox (npm, pypi, or for platform admins a command; see
    ``tools_app.backends.packaged``)."""

    class Kind(models.TextChoices):
        HTTP = "http", "Streamable HTTP server at a URL"
        NPM = "npm", "npm package (stdio)"
        PYPI = "pypi", "PyPI package (stdio)"
        COMMAND = "command", "Command (stdio; platform admins only)"

    class InstallState(models.TextChoices):
        NONE = "", "Not installed"
        INSTALLED = "installed", "Installed"
        FAILED = "failed", "Install failed"

    class Auth(models.TextChoices):
        NONE = "none", "None"
        BEARER = "bearer", "Bearer token (Authorization: Bearer <secret>)"
        HEADER = "header", "Custom header (<header>: <secret>)"

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="upstream_servers",
        help_text="Empty: imported tools are platform tools. Set: they are private to that tenant.",
    )
    name = models.CharField(max_length=100, validators=[NAME_VALIDATOR])
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HTTP)
    url = models.URLField(
        max_length=500, blank=True, help_text="The server's Streamable HTTP endpoint, e.g. https://host/mcp."
    )
    package = models.CharField(
        max_length=214, blank=True, help_text="npm or PyPI package name, e.g. @modelcontextprotocol/server-everything."
    )
    version = models.CharField(
        max_length=100, blank=True, help_text="The exact version that is installed and run (pinned)."
    )
    command = models.JSONField(
        default=list, blank=True, help_text='For a command: the program and its arguments, e.g. ["/usr/bin/foo"].'
    )
    args = models.JSONField(default=list, blank=True, help_text="Arguments given to the packaged server.")
    env = models.JSONField(default=dict, blank=True, help_text="Environment values (plain) of the packaged server.")
    env_secrets = models.JSONField(
        default=dict,
        blank=True,
        help_text='Environment values from secrets of the same tenant: {"API_KEY": "<secret name>"}.',
    )
    allow_hosts = models.JSONField(
        default=list,
        blank=True,
        help_text='Hosts the packaged server may reach (host or host:port, "*.example.com"); empty: no network.',
    )
    per_user = models.BooleanField(
        default=False, help_text="One instance per user (API key or OAuth subject) instead of one per tenant."
    )
    trusted = models.BooleanField(
        default=False,
        help_text="Reviewed code: may run where no sandbox is available. Only platform admins set this.",
    )
    install_state = models.CharField(
        max_length=16, choices=InstallState.choices, blank=True, default=InstallState.NONE, editable=False
    )
    install_error = models.TextField(blank=True, editable=False)
    integrity = models.CharField(
        max_length=200, blank=True, editable=False, help_text="What the install recorded (npm integrity, lock hash)."
    )
    installed_at = models.DateTimeField(null=True, blank=True, editable=False)
    auth = models.CharField(max_length=16, choices=Auth.choices, default=Auth.NONE)
    auth_header = models.CharField(
        max_length=100, blank=True, help_text="For a custom header: its name, e.g. X-Api-Key."
    )
    secret = models.ForeignKey(
        BackendSecret,
        null=True,
        blank=True,
        on_delete=models.RESTRICT,  # a tenant deleted takes both; a secret alone may not go
        related_name="upstream_servers",
        help_text="The credential, from the secrets of the same tenant.",
    )
    user_credential = models.JSONField(
        default=dict,
        blank=True,
        help_text='Calls send the calling user\'s own token instead: {"type": "connection", "provider": '
        '"<provider>", "scopes": [...]} (their connection) or {"type": "token_exchange", "provider": '
        '"<provider>", "audience": "<the server\'s audience>", "scopes": [...]} (RFC 8693). Listing the '
        "server's tools (import, refresh, the listener) still uses the credential above.",
    )
    tool_prefix = models.CharField(
        max_length=40,
        blank=True,
        validators=[RegexValidator(r"^[A-Za-z0-9_.-]*$", "A prefix is made of A-Z a-z 0-9 _ . -")],
        help_text="Prepended to the names of tools imported from now on, e.g. 'github.'.",
    )
    tags = models.JSONField(default=list, blank=True, help_text="Tags given to tools imported from now on.")
    publish_new_tools = models.BooleanField(
        default=False,
        help_text="Publish tools the upstream adds as soon as a refresh sees them. Off: new tools wait "
        "until you publish them.",
    )
    auto_approve = models.BooleanField(
        default=False,
        help_text="Trust this server: a refresh that changes a published tool's title, description, schemas, "
        "annotations or icons applies the change at once. Off: the change waits for an admin's approval "
        "(Pending definitions) and clients keep the approved definition.",
    )
    timeout_seconds = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Default timeout of imported tools.",
    )
    import_resources_and_prompts = models.BooleanField(
        default=False,
        help_text="Mirror the upstream's resources, resource templates and prompts on every refresh (named with "
        "the prefix, tagged with the tags; grant them with access rules of their kind).",
    )
    enabled = models.BooleanField(default=True, help_text="Disabled: calls fail and nobody listens for changes.")
    discovered_tools = models.JSONField(default=list, blank=True, editable=False)
    server_info = models.JSONField(default=dict, blank=True, editable=False)
    refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = unique_per_catalog("name")

    def __str__(self) -> str:
        return named(self)

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        if self.url and not self.url.lower().startswith(("http://", "https://")):
            errors["url"] = "Use an http:// or https:// URL."
        errors.update(self._packaged_errors())
        if self.auth != self.Auth.NONE and self.secret_id is None:
            errors["secret"] = "Choose the secret this authentication sends."
        if self.auth == self.Auth.HEADER and not self.auth_header.strip():
            errors["auth_header"] = "Name the header that carries the secret."
        if self.secret_id is not None and self.secret is not None and self.secret.tenant_id != self.tenant_id:
            errors["secret"] = "Use a secret of the same tenant (or a platform secret for a platform server)."
        if self.user_credential:
            problem = self._user_credential_problem()
            if problem:
                errors["user_credential"] = problem
        try:
            check_string_list(self.tags, what="Tags")
        except ValidationError as exc:
            errors["tags"] = exc.messages
        if errors:
            raise ValidationError(errors)

    def _user_credential_problem(self) -> str:
        if self.packaged:
            return "A packaged server takes credentials as environment values; a user's credential needs a URL."
        try:
            UserCredential.parse(self.user_credential, what="The user credential").check_provider(self.tenant_id)
        except BackendConfigError as exc:
            return str(exc)
        return ""

    @property
    def user_credential_spec(self) -> UserCredential | None:
        return UserCredential.parse(self.user_credential) if self.user_credential else None

    @property
    def packaged(self) -> bool:
        return self.kind != self.Kind.HTTP

    def _packaged_errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if self.kind == self.Kind.HTTP:
            if not self.url:
                errors["url"] = "A Streamable HTTP server needs its URL."
            return errors
        if self.auth != self.Auth.NONE:
            errors["auth"] = "A packaged server takes credentials as environment values (env_secrets)."
        if self.kind in (self.Kind.NPM, self.Kind.PYPI):
            if not PACKAGE_NAME.match(self.package or ""):
                errors["package"] = "Name the package, e.g. mcp-server-time or @scope/name."
            if not EXACT_VERSION.match(self.version or ""):
                errors["version"] = "Pin an exact version, e.g. 1.2.3."
        elif not self.command or not all(isinstance(part, str) and part for part in self.command):
            errors["command"] = 'A command is a list of strings: ["/path/to/program", "arg", ...].'
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            errors["args"] = "Arguments are a list of strings."
        if not isinstance(self.env, dict) or not all(
            isinstance(k, str) and ENV_NAME.match(k) and isinstance(v, str) for k, v in self.env.items()
        ):
            errors["env"] = 'Environment values are {"NAME": "value"} with names of A-Z a-z 0-9 _.'
        if not isinstance(self.env_secrets, dict) or not all(
            isinstance(k, str) and ENV_NAME.match(k) and isinstance(v, str) for k, v in self.env_secrets.items()
        ):
            errors["env_secrets"] = 'Secret environment values are {"NAME": "<secret name>"}.'
        elif self.env_secrets:
            known = set(
                BackendSecret.objects.filter(
                    owned_by(self.tenant_id), name__in=list(self.env_secrets.values())
                ).values_list("name", flat=True)
            )
            missing = sorted(set(self.env_secrets.values()) - known)
            if missing:
                errors["env_secrets"] = f"No secret named {', '.join(missing)} among this catalog's secrets."
        if not isinstance(self.allow_hosts, list) or not all(
            isinstance(h, str) and HOST_PATTERN.match(h) for h in self.allow_hosts
        ):
            errors["allow_hosts"] = 'Allowed hosts are a list like ["api.example.com", "*.example.org:443"].'
        return errors
