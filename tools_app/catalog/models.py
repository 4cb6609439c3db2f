"""The catalog: tools, resources, resource templates and prompts, and the access rules that
grant them."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from tenants.models import ApiKey, Tenant
from tools_app.catalog.backend_kinds import backend_config_errors
from tools_app.catalog.fields import VerbatimJSONField
from tools_app.catalog.prompt_messages import MessageProblem, check_messages
from tools_app.catalog.uri_templates import TemplateProblem, compile_template
from tools_app.catalog.validation import (
    argument_errors,
    check_icons,
    check_string_list,
    completion_errors,
    tool_field_errors,
    worker_timeout_error,
)

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
TOOL_NAME_VALIDATOR = RegexValidator(TOOL_NAME_PATTERN, "Tool names are 1-128 characters of A-Z a-z 0-9 _ . -")

NO_ARGUMENTS_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": False}


def _related_or_none(instance: models.Model, field: str) -> Any:
    """The related object, or None when its row is already gone.

    str() runs during cascade deletes (the change audit records each deleted row), and
    Django deletes the targets of nullable foreign keys in no particular order: a tool
    may be gone before the rules pointing at it.
    """
    try:
        return getattr(instance, field)
    except ObjectDoesNotExist:
        return None


def default_input_schema() -> dict[str, Any]:
    return dict(NO_ARGUMENTS_SCHEMA)


class Confirmation(models.TextChoices):
    """Who must say yes before a call runs (see tools_app.catalog.confirmation)."""

    NONE = "none", "None: calls run at once"
    DESTRUCTIVE = "destructive", "Destructive: the user confirms unless read-only or not destructive"
    ALWAYS = "always", "Always: the user confirms every call"
    OPERATOR = "operator", "Operator: an operator of the tenant approves each call in the console"


def optional_tenant(*, related_name: str, help_text: str) -> models.ForeignKey[Tenant | None, Tenant | None]:
    """A link to a tenant that may be empty (the platform's, or every tenant's); gone with its tenant."""
    return models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name=related_name, help_text=help_text
    )


def json_list(help_text: str = "") -> models.JSONField[Any, Any]:
    """A JSON list field, empty unless set."""
    return models.JSONField(default=list, blank=True, help_text=help_text)


def unique_per_catalog(field: str) -> list[models.BaseConstraint]:
    """``field`` is unique in each catalog: once among platform rows (no tenant), once per tenant.

    For every model a platform admin or a tenant owns (catalog entries, backend secrets,
    upstream servers). Django fills in ``%(class)s``: each model's constraints get its name.
    """
    return [
        models.UniqueConstraint(
            fields=[field], condition=Q(tenant__isnull=True), name=f"%(class)s_unique_platform_{field}"
        ),
        models.UniqueConstraint(fields=["tenant", field], name=f"%(class)s_unique_private_{field}"),
    ]


class CatalogEntry(models.Model):
    """What tools, resources, resource templates and prompts share: a catalog (platform or one
    tenant's), a name, presentation, tags for access rules, backend settings, and a version that
    moves on every save. Each kind adds its own fields and its ``Backend`` choices."""

    # The field unique per catalog (``unique_per_catalog``): what str() and clash messages name.
    catalog_key: ClassVar[str] = "name"
    # Each kind declares the field with its own ``Backend`` choices and default.
    backend_kind: str

    tenant = optional_tenant(
        related_name="private_%(class)ss", help_text="Empty: in the platform catalog. Set: private to that tenant."
    )
    name = models.CharField(max_length=128, validators=[TOOL_NAME_VALIDATOR])
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    icons = json_list()
    tags = json_list("Labels access rules can match with tag:<label>.")
    backend_config = models.JSONField(default=dict, blank=True)
    timeout_seconds = models.FloatField(default=30.0, validators=[MinValueValidator(0.1), MaxValueValidator(3600)])
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        key = str(getattr(self, self.catalog_key))
        return key if self.tenant_id is None else f"{key} ({self.catalog_label()})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The version is part of the entry's identity for caches and audit, so it must move
        # on every write path (admin, API, shell); that is why it lives here, not in a service.
        if self.pk is None or kwargs.get("force_insert"):
            super().save(*args, **kwargs)
            return
        self.version = F("version") + 1
        if kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "version"}
        super().save(*args, **kwargs)
        self.refresh_from_db(fields=["version"])

    def catalog_label(self) -> str:
        if self.tenant_id is None:
            return "platform"
        tenant = _related_or_none(self, "tenant")
        return f"private to {tenant or f'tenant #{self.tenant_id}'}"

    def common_errors(self) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        try:
            check_icons(self.icons)
        except ValidationError as exc:
            errors["icons"] = exc.messages
        try:
            check_string_list(self.tags, what="Tags")
        except ValidationError as exc:
            errors["tags"] = exc.messages
        return errors


class Tool(CatalogEntry):
    """A tool clients list and call: its schemas, annotations, and the backend that runs it."""

    class Backend(models.TextChoices):
        PYTHON = "python", "Python handler"
        HTTP = "http", "HTTP webhook"
        UPSTREAM_MCP = "upstream_mcp", "Upstream MCP server"

    class ExecutionMode(models.TextChoices):
        INLINE = "inline", "Inline (in the ASGI process)"
        BACKGROUND = "background", "Background (Celery worker)"

    class TaskSupport(models.TextChoices):
        FORBIDDEN = "forbidden", "Forbidden"
        OPTIONAL = "optional", "Optional"
        REQUIRED = "required", "Required"

    # Required here (the others may leave it empty): models read it to decide when to call the tool.
    description = models.TextField()
    # Kept verbatim, key order included (see tools_app/catalog/fields.py).
    input_schema = VerbatimJSONField(default=default_input_schema)
    output_schema = VerbatimJSONField(null=True, blank=True)
    read_only_hint = models.BooleanField(null=True, blank=True)
    destructive_hint = models.BooleanField(null=True, blank=True)
    idempotent_hint = models.BooleanField(null=True, blank=True)
    open_world_hint = models.BooleanField(null=True, blank=True)
    backend_kind = models.CharField(max_length=32, choices=Backend.choices, default=Backend.PYTHON)
    execution_mode = models.CharField(max_length=16, choices=ExecutionMode.choices, default=ExecutionMode.INLINE)
    task_support = models.CharField(max_length=16, choices=TaskSupport.choices, default=TaskSupport.FORBIDDEN)
    # Background tools run on workers for up to a day; the others' reads answer a client waiting inline.
    timeout_seconds = models.FloatField(default=30.0, validators=[MinValueValidator(0.1), MaxValueValidator(24 * 3600)])
    always_visible = models.BooleanField(
        default=False,
        help_text="On endpoints in search mode, list this tool next to the search tool (callers who may see it).",
    )
    confirmation = models.CharField(
        max_length=16,
        choices=Confirmation.choices,
        default=Confirmation.DESTRUCTIVE,
        help_text="Who must say yes before a call runs. 'Destructive' reads the annotations with the spec's "
        "defaults: a tool without readOnlyHint and destructiveHint asks. A call waits for the answer up to "
        "the tool's timeout.",
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = unique_per_catalog("name")

    def clean(self) -> None:
        errors = tool_field_errors(
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            icons=self.icons,
            tags=self.tags,
            backend_kind=self.backend_kind,
            backend_config=self.backend_config,
            description=self.description,
            tenant_id=self.tenant_id,
        )
        too_long = worker_timeout_error(
            name=self.name,
            timeout_seconds=self.timeout_seconds,
            execution_mode=self.execution_mode,
            task_support=self.task_support,
        )
        if too_long:
            errors.setdefault("timeout_seconds", []).append(too_long)
        if errors:
            raise ValidationError(errors)

    def annotations(self) -> dict[str, bool]:
        pairs = {
            "readOnlyHint": self.read_only_hint,
            "destructiveHint": self.destructive_hint,
            "idempotentHint": self.idempotent_hint,
            "openWorldHint": self.open_world_hint,
        }
        return {key: value for key, value in pairs.items() if value is not None}


class AccessRule(models.Model):
    class Effect(models.TextChoices):
        ALLOW = "allow", "Allow"
        DENY = "deny", "Deny"

    class Kind(models.TextChoices):
        """What a pattern rule matches: tools (the default, as before resources existed),
        resources (with resource templates), prompts, or all of them."""

        TOOL = "tool", "Tools"
        RESOURCE = "resource", "Resources and resource templates"
        PROMPT = "prompt", "Prompts"
        ANY = "any", "Tools, resources and prompts"

    effect = models.CharField(max_length=8, choices=Effect.choices, default=Effect.ALLOW)
    kind = models.CharField(
        max_length=16,
        choices=Kind.choices,
        default=Kind.TOOL,
        help_text="What the pattern matches. A rule on one tool (the tool field) is a tools rule.",
    )
    tool = models.ForeignKey(
        Tool,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="access_rules",
        help_text="One tool. Leave empty to match by pattern instead.",
    )
    tool_pattern = models.CharField(
        max_length=200,
        blank=True,
        help_text="A glob on names (e.g. 'demo.*' or '*'; resources also match by URI), or 'tag:<label>' for "
        "what carries that tag. 'Kind' says whether it matches tools, resources, prompts or all.",
    )
    tenant = optional_tenant(related_name="access_rules", help_text="Empty: every tenant.")
    owner = optional_tenant(
        related_name="owned_access_rules",
        help_text="Empty: a platform rule. Set: managed by that tenant's admins; it can grant only the "
        "tenant's private tools and can deny anything for that tenant.",
    )
    api_keys = models.ManyToManyField(
        ApiKey, blank=True, related_name="access_rules", help_text="Narrow the rule to these keys."
    )
    oauth_subjects = models.JSONField(
        default=list,
        blank=True,
        help_text="Narrow the rule to OAuth callers with one of these subjects (the token's subject claim).",
    )
    oauth_groups = models.JSONField(
        default=list,
        blank=True,
        help_text="Narrow the rule to OAuth callers in one of these groups (the groups or roles claim).",
    )
    scopes = models.JSONField(
        default=list,
        blank=True,
        help_text="Narrow the rule to credentials holding any of these scopes (key scopes, token scopes). A "
        "tenant's admins set the scopes of its keys: on a platform rule, scopes let the tenant choose which of its "
        "credentials the rule applies to.",
    )
    confirmation = models.CharField(
        max_length=16,
        choices=Confirmation.choices,
        blank=True,
        help_text="A stricter confirmation policy for the callers this rule applies to (empty: the tool's). "
        "The strictest applicable policy wins: a rule can tighten a tool's policy, never loosen it.",
    )
    always_visible = models.BooleanField(
        default=False,
        help_text="An allow rule's tools are listed next to the search tool on endpoints in search mode, for the "
        "callers the rule applies to.",
    )
    enabled = models.BooleanField(
        default=True,
        help_text="A disabled rule applies to no one. Toolbay disables a rule whose last API key was deleted "
        "rather than let it apply to every credential.",
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(tool__isnull=False) & Q(tool_pattern="")) | (Q(tool__isnull=True) & ~Q(tool_pattern="")),
                name="accessrule_tool_xor_pattern",
            ),
            models.CheckConstraint(
                condition=Q(owner__isnull=True) | Q(tenant=F("owner")),
                name="accessrule_owner_rules_own_tenant",
            ),
            models.CheckConstraint(
                condition=Q(tool__isnull=True) | Q(kind="tool"), name="accessrule_tool_target_is_tools_rule"
            ),
        ]

    def __str__(self) -> str:
        target = self.tool_pattern
        if self.tool_id is not None:
            tool = _related_or_none(self, "tool")
            target = tool.name if tool is not None else f"tool #{self.tool_id}"
        who = "all tenants"
        if self.tenant_id is not None:
            tenant = _related_or_none(self, "tenant")
            who = tenant.slug if tenant is not None else f"tenant #{self.tenant_id}"
        what = "" if self.kind == self.Kind.TOOL else f" ({self.get_kind_display().lower()})"
        return f"{self.effect} {target}{what} → {who}"

    def clean(self) -> None:
        if (self.tool_id is None) == (not self.tool_pattern):
            raise ValidationError("Choose exactly one target: a tool, or a pattern (glob or tag:<label>).")
        if self.tool_id is not None and self.kind != self.Kind.TOOL:
            raise ValidationError({"kind": "A rule on one tool is a tools rule; use a pattern for other kinds."})
        if self.owner_id is not None and self.tenant_id != self.owner_id:
            raise ValidationError({"tenant": "A tenant-managed rule applies to its own tenant only."})
        grants_foreign_tool = (
            self.tool_id is not None and self.tool is not None and self.tool.tenant_id != self.owner_id
        )
        if self.owner_id is not None and self.effect == self.Effect.ALLOW and grants_foreign_tool:
            raise ValidationError({"tool": "Tenant-managed rules can grant only the tenant's private tools."})
        for name, what in (
            ("scopes", "Scopes"),
            ("oauth_subjects", "OAuth subjects"),
            ("oauth_groups", "OAuth groups"),
        ):
            try:
                check_string_list(getattr(self, name), what=what)
            except ValidationError as exc:
                raise ValidationError({name: exc.messages}) from None


URI_PATTERN = r"^[A-Za-z][A-Za-z0-9+.-]*:[!-~]*$"
URI_VALIDATOR = RegexValidator(
    URI_PATTERN, "A URI: a scheme such as file: or https:, then no spaces or non-ASCII text."
)
AUDIENCES = ("user", "assistant")


class Annotated(models.Model):
    """MCP annotations of resources and templates (how clients may use and rank them)."""

    audience = json_list('Who it is for: ["user"], ["assistant"] or both; empty: unsaid.')
    priority = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="0 (optional) to 1 (effectively required); empty: unsaid.",
    )

    class Meta:
        abstract = True

    def audience_errors(self) -> dict[str, list[str]]:
        if not isinstance(self.audience, list) or not set(self.audience) <= set(AUDIENCES):
            return {"audience": ['Audience is a list of "user" and/or "assistant".']}
        if len(set(self.audience)) != len(self.audience):
            return {"audience": ["Name each audience once."]}
        return {}


class Resource(CatalogEntry, Annotated):
    """One resource at a fixed URI: static content stored here, or read from a backend."""

    class Backend(models.TextChoices):
        STATIC = "static", "Static content (stored here)"
        PYTHON = "python", "Python handler"
        HTTP = "http", "HTTP endpoint"
        UPSTREAM_MCP = "upstream_mcp", "Upstream MCP server"

    catalog_key = "uri"

    uri = models.CharField(max_length=2048, validators=[URI_VALIDATOR])
    mime_type = models.CharField(max_length=200, blank=True)
    text = models.TextField(blank=True, help_text="Text content (static resources without binary content).")
    blob = models.BinaryField(
        null=True, blank=True, help_text="Binary content; when set, it is served instead of text."
    )
    size = models.PositiveIntegerField(null=True, blank=True, editable=False, help_text="Bytes of static content.")
    last_modified = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When the static content last changed (lastModified)."
    )
    backend_kind = models.CharField(max_length=32, choices=Backend.choices, default=Backend.STATIC)

    class Meta:
        ordering = ["uri", "id"]
        constraints = unique_per_catalog("uri")

    # The content as loaded, to tell a content change from other edits (it is announced to subscribers).
    _loaded_content: str | None = None
    _announce_update = False

    @classmethod
    def from_db(cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any) -> Resource:
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._loaded_content = instance.content_digest() if "text" in field_names else None
        return instance

    def content_bytes(self) -> bytes:
        return bytes(self.blob) if self.blob is not None else self.text.encode()

    def content_digest(self) -> str:
        return hashlib.sha256(
            b"b" + bytes(self.blob) if self.blob is not None else b"t" + self.text.encode()
        ).hexdigest()

    @property
    def content_changed(self) -> bool:
        """Whether saving now changes the static content (True for a new resource)."""
        return getattr(self, "_loaded_content", None) != self.content_digest()

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.backend_kind == self.Backend.STATIC:
            self.size = len(self.content_bytes())
            if self.content_changed:
                self.last_modified = timezone.now()
                self._announce_update = self.pk is not None  # subscribers hear of changed content
        else:
            self.size = None
        super().save(*args, **kwargs)
        self._loaded_content = self.content_digest()

    def clean(self) -> None:
        errors = {**self.common_errors(), **self.audience_errors()}
        limit = settings.TOOLBAY_RESOURCE_MAX_BYTES
        if self.backend_kind == self.Backend.STATIC:
            if len(self.content_bytes()) > limit:
                errors["text" if self.blob is None else "blob"] = [
                    f"Static content may be {limit} bytes at most (TOOLBAY_RESOURCE_MAX_BYTES)."
                ]
            if self.backend_config:
                errors["backend_config"] = ["Static resources take no backend settings."]
        else:
            for message in backend_config_errors(
                self.backend_kind, self.backend_config, tenant_id=self.tenant_id, feature="resource"
            ):
                errors.setdefault("backend_config", []).append(message)
        if errors:
            raise ValidationError(errors)


class ResourceTemplate(CatalogEntry, Annotated):
    """Resources described by an RFC 6570 URI template, read from a backend."""

    class Backend(models.TextChoices):
        PYTHON = "python", "Python handler"
        HTTP = "http", "HTTP endpoint"
        UPSTREAM_MCP = "upstream_mcp", "Upstream MCP server"

    uri_template = models.CharField(max_length=2048, help_text="RFC 6570, e.g. file:///logs/{date}.txt")
    mime_type = models.CharField(max_length=200, blank=True)
    backend_kind = models.CharField(max_length=32, choices=Backend.choices, default=Backend.PYTHON)
    completions = models.JSONField(
        default=dict,
        blank=True,
        help_text='Values completion/complete offers per variable, e.g. {"date": ["2026-01-01", "2026-01-02"]}.',
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = unique_per_catalog("name")

    def clean(self) -> None:
        errors = {**self.common_errors(), **self.audience_errors()}
        variables: tuple[str, ...] = ()
        try:
            variables = compile_template(self.uri_template).variables
        except TemplateProblem as exc:
            errors["uri_template"] = [str(exc)]
        completion_problem = completion_errors(self.completions, set(variables), what="variable")
        if completion_problem and "uri_template" not in errors:
            errors["completions"] = [completion_problem]
        for message in backend_config_errors(
            self.backend_kind, self.backend_config, tenant_id=self.tenant_id, feature="template"
        ):
            errors.setdefault("backend_config", []).append(message)
        if errors:
            raise ValidationError(errors)


class Prompt(CatalogEntry):
    """A prompt template: arguments and messages rendered from them (or a backend's messages)."""

    class Backend(models.TextChoices):
        TEMPLATE = "template", "Messages written here (Mustache)"
        PYTHON = "python", "Python handler"
        HTTP = "http", "HTTP endpoint"
        UPSTREAM_MCP = "upstream_mcp", "Upstream MCP server"

    arguments = json_list('[{"name": "topic", "description": "…", "required": true}, …] (also "title").')
    messages = json_list(
        '[{"role": "user", "content": {"type": "text", "text": "Explain {{topic}}."}}, …]; text, '
        "image, audio, resource and resource_link blocks; text is a Mustache template."
    )
    backend_kind = models.CharField(max_length=32, choices=Backend.choices, default=Backend.TEMPLATE)
    completions = models.JSONField(
        default=dict, blank=True, help_text='Values completion/complete offers per argument: {"topic": ["…"]}.'
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = unique_per_catalog("name")

    def argument_names(self) -> set[str]:
        return {argument["name"] for argument in self.arguments if isinstance(argument, dict) and "name" in argument}

    def clean(self) -> None:
        errors = self.common_errors()
        problem = argument_errors(self.arguments)
        if problem:
            errors["arguments"] = [problem]
        if not (self.description or "").strip():
            errors["description"] = ["A description is required: clients show it when users pick a prompt."]
        if self.backend_kind == self.Backend.TEMPLATE:
            if self.backend_config:
                errors["backend_config"] = ["Prompts written here take no backend settings."]
            if not problem:
                try:
                    check_messages(self.messages, self.argument_names())
                except MessageProblem as exc:
                    errors["messages"] = [str(exc)]
        else:
            if self.messages:
                errors["messages"] = ["A prompt served by a backend has no messages here."]
            for message in backend_config_errors(
                self.backend_kind, self.backend_config, tenant_id=self.tenant_id, feature="prompt"
            ):
                errors.setdefault("backend_config", []).append(message)
        completion_problem = completion_errors(self.completions, self.argument_names(), what="argument")
        if completion_problem and not problem:
            errors["completions"] = [completion_problem]
        if errors:
            raise ValidationError(errors)


class PendingDefinition(models.Model):
    """A definition of an imported tool that its source (an upstream MCP server's refresh, a
    re-import of an OpenAPI document) offered and that waits for an admin's approval.

    The tool's own fields are the pinned definition: clients keep seeing them until the
    proposal is approved (``tools_app.catalog.pinning``). ``proposed`` holds only the fields
    that differ, ``diff`` the same as ``field: [pinned, proposed]`` at the time it was parked.
    At most one proposal per tool is pending; a newer one supersedes it.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        # The source offered another definition (or the pinned one again, or it was applied directly).
        SUPERSEDED = "superseded", "Superseded"

    class SourceKind(models.TextChoices):
        UPSTREAM_MCP = "upstream_mcp", "Upstream MCP server"
        OPENAPI = "openapi", "OpenAPI document"

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="pending_definitions")
    # The tool's tenant, kept here so every scoped read (admin, console, API) filters one table.
    tenant = optional_tenant(related_name="pending_definitions", help_text="The tool's tenant; empty: platform.")
    source_kind = models.CharField(max_length=16, choices=SourceKind.choices)
    source_id = models.BigIntegerField(help_text="The UpstreamServer's or OpenApiSource's id.")
    source_name = models.CharField(max_length=200)
    proposed = models.JSONField(help_text="The fields the source changed, with their new values.")
    diff = models.JSONField(help_text="field → [pinned, proposed] when it was parked.")
    sha256 = models.CharField(
        max_length=64, help_text="Hash of the proposed fields (a rejected one is not parked again)."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool"], condition=Q(status="pending"), name="pendingdefinition_one_pending_per_tool"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "status", "-created_at"], name="pendingdef_tenant_status")]

    def __str__(self) -> str:
        tool = _related_or_none(self, "tool")
        name = tool.name if tool is not None else f"tool #{self.tool_id}"
        return f"{name}: {', '.join(sorted(self.diff))} ({self.status})"


class ToolCuration(models.Model):
    """What the model sees of a tool instead of its source definition (see
    ``tools_app.catalog.curation``). Kept apart from the tool's fields, which imports and
    upstream refreshes overwrite, so it survives them; applied when the catalog is loaded."""

    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="curation")
    name = models.CharField(
        max_length=128,
        blank=True,
        validators=[TOOL_NAME_VALIDATOR],
        help_text="The name clients list and call; empty: the tool's own.",
    )
    title = models.CharField(max_length=200, blank=True, help_text="Empty: the tool's own.")
    description = models.TextField(blank=True, help_text="Empty: the tool's own.")
    arguments = models.JSONField(
        default=dict,
        blank=True,
        help_text='Rules per argument, e.g. {"account": {"hidden": true, "value": "acme"}, "limit": {"default": 20, '
        '"maximum": 50}, "status": {"enum": ["open"]}}. Keys: hidden, value, default, enum, minimum, maximum, '
        "minLength, maxLength, pattern, title, description.",
    )
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tool curation"

    def __str__(self) -> str:
        tool = _related_or_none(self, "tool")
        return f"curation of {tool if tool is not None else f'tool #{self.tool_id}'}"

    @property
    def tenant_id(self) -> int | None:
        """The tool's catalog (the change audit files the curation under it)."""
        tool = _related_or_none(self, "tool")
        return tool.tenant_id if tool is not None else None

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Moves on every write, like a catalog entry's version: clients' list fingerprints include it.
        if self.pk is not None and not kwargs.get("force_insert"):
            self.version = F("version") + 1
            super().save(*args, **kwargs)
            self.refresh_from_db(fields=["version"])
            return
        super().save(*args, **kwargs)

    def is_empty(self) -> bool:
        return not (self.name or self.title or self.description or self.arguments)
