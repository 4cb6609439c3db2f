"""The tool catalog: tools and the access rules that grant them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q

from tenants.models import ApiKey, Tenant
from tools_app.catalog.fields import VerbatimJSONField
from tools_app.catalog.validation import check_string_list, tool_field_errors

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


class Tool(models.Model):
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

    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="private_tools",
        help_text="Empty: a platform catalog tool. Set: private to that tenant.",
    )
    name = models.CharField(max_length=128, validators=[TOOL_NAME_VALIDATOR])
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField()
    # Kept verbatim, key order included (see tools_app/fields.py).
    input_schema = VerbatimJSONField(default=default_input_schema)
    output_schema = VerbatimJSONField(null=True, blank=True)
    read_only_hint = models.BooleanField(null=True, blank=True)
    destructive_hint = models.BooleanField(null=True, blank=True)
    idempotent_hint = models.BooleanField(null=True, blank=True)
    open_world_hint = models.BooleanField(null=True, blank=True)
    icons = models.JSONField(default=list, blank=True)
    tags = models.JSONField(default=list, blank=True, help_text="Labels access rules can match with tag:<label>.")
    backend_kind = models.CharField(max_length=32, choices=Backend.choices, default=Backend.PYTHON)
    backend_config = models.JSONField(default=dict, blank=True)
    execution_mode = models.CharField(max_length=16, choices=ExecutionMode.choices, default=ExecutionMode.INLINE)
    task_support = models.CharField(max_length=16, choices=TaskSupport.choices, default=TaskSupport.FORBIDDEN)
    timeout_seconds = models.FloatField(default=30.0, validators=[MinValueValidator(0.1), MaxValueValidator(24 * 3600)])
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="tool_unique_platform_name"
            ),
            models.UniqueConstraint(fields=["tenant", "name"], name="tool_unique_private_name"),
        ]

    def __str__(self) -> str:
        if self.tenant_id is None:
            return self.name
        tenant = _related_or_none(self, "tenant")
        return f"{self.name} (private to {tenant or f'tenant #{self.tenant_id}'})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The version is part of the tool's identity for caches and audit, so it must move
        # on every write path (admin, API, shell); that is why it lives here, not in a service.
        if self.pk is None or kwargs.get("force_insert"):
            super().save(*args, **kwargs)
            return
        self.version = F("version") + 1
        if kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "version"}
        super().save(*args, **kwargs)
        self.refresh_from_db(fields=["version"])

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

    effect = models.CharField(max_length=8, choices=Effect.choices, default=Effect.ALLOW)
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
        help_text="A glob on tool names (e.g. 'demo.*' or '*'), or 'tag:<label>' for tools carrying that tag.",
    )
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="access_rules",
        help_text="Empty: every tenant.",
    )
    owner = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
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
        help_text="Narrow the rule to credentials holding any of these scopes (key scopes, token scopes).",
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
        return f"{self.effect} {target} → {who}"

    def clean(self) -> None:
        if (self.tool_id is None) == (not self.tool_pattern):
            raise ValidationError("Choose exactly one target: a tool, or a pattern (glob or tag:<label>).")
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
