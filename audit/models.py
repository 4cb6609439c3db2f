"""The audit log: one ``Invocation`` per tool call and an append-only ``AuditEvent`` per change."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from tenants.models import Tenant

# A URI is kept up to this length (the invocation log's indexes hold it).
MAX_TARGET_LENGTH = 1024


class Outcome(models.TextChoices):
    """How a call ended: the one vocabulary of the call runtime, the invocation log and the console."""

    COMPLETED = "completed", "Completed"
    ERROR = "error", "Tool error"
    INVALID_ARGUMENTS = "invalid_arguments", "Invalid arguments"
    DENIED = "denied", "Denied"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    # A round of a 2026-07-28 multi-round call that asked the client for input (the retry
    # that brings the answers is another invocation).
    INPUT_REQUIRED = "input_required", "Input required"
    # A call that needed a person's confirmation and did not get it (declined, cancelled, no
    # answer in time, or a client that cannot ask): the tool did not run.
    NOT_CONFIRMED = "not_confirmed", "Not confirmed"


class ConfirmationOutcome(models.TextChoices):
    """What became of the confirmation a call needed (empty: it needed none)."""

    ASKED = "asked", "Asked (waiting for the answer)"
    GRANTED = "granted", "Granted"
    DECLINED = "declined", "Declined"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "No answer in time"
    REFUSED = "refused", "Refused: the client cannot ask"


# Every answer that kept a call from running.
CONFIRMATION_REFUSALS = (
    ConfirmationOutcome.DECLINED,
    ConfirmationOutcome.CANCELLED,
    ConfirmationOutcome.TIMED_OUT,
    ConfirmationOutcome.REFUSED,
)


class InvocationKind(models.TextChoices):
    """What was invoked: a tool (tools/call or an MCP task), a resource (resources/read) or a
    prompt (prompts/get)."""

    TOOL = "tool", "Tool call"
    RESOURCE = "resource", "Resource read"
    PROMPT = "prompt", "Prompt"


class Invocation(models.Model):
    """One tools/call (or MCP task), resources/read or prompts/get, whatever its outcome;
    written in batches off the call path."""

    Outcome = Outcome
    Kind = InvocationKind

    # Every index costs each audited call a write (the audit insert is the database's main
    # per-call load), so there is none a wider one already serves: tenant_id leads the
    # composite indexes below (db_index=False), and call_id's uniqueness is a constraint
    # (Meta) rather than unique=True, which on PostgreSQL adds a second, LIKE-only index.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invocations", db_index=False)
    # The call's identity in the audit journal: the writer skips a row whose call_id is there.
    call_id = models.CharField(max_length=32, null=True, blank=True, editable=False)
    key_id = models.BigIntegerField(null=True, blank=True, help_text="The API key's id (never the key).")
    key_label = models.CharField(
        max_length=150, blank=True, help_text="Key name and prefix, the OAuth subject and client, or 'anonymous'."
    )
    oauth_subject = models.CharField(
        max_length=255, blank=True, help_text="The OAuth access token's subject (empty for API keys)."
    )
    oauth_client = models.CharField(max_length=255, blank=True, help_text="The OAuth client the token was issued to.")
    session_id = models.CharField(max_length=128, blank=True)
    protocol_version = models.CharField(
        max_length=16, blank=True, help_text="The MCP revision of the call (2026-07-28, 2025-11-25, …)."
    )
    client_name = models.CharField(max_length=200, blank=True)
    client_version = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=InvocationKind.choices, default=InvocationKind.TOOL)
    tool_id = models.BigIntegerField(null=True, blank=True, help_text="The tool's, resource's or prompt's id.")
    tool_name = models.CharField(
        max_length=MAX_TARGET_LENGTH, help_text="The tool's or prompt's name, or the URI that was read."
    )
    tool_version = models.PositiveIntegerField(null=True, blank=True)
    arguments = models.JSONField(default=dict, blank=True, help_text="With sensitive fields redacted.")
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    error_message = models.TextField(blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    run_id = models.CharField(max_length=32, blank=True, help_text="The background run or MCP task.")
    is_task = models.BooleanField(default=False)
    confirmation = models.CharField(
        max_length=16,
        choices=ConfirmationOutcome.choices,
        blank=True,
        help_text="The confirmation the call needed and what became of it (empty: none was needed).",
    )
    confirmed_by = models.CharField(
        max_length=150, blank=True, help_text="Who answered it: the client's user, or the operator in the console."
    )
    confirmed_at = models.DateTimeField(null=True, blank=True, help_text="When it was answered.")
    # NULL, not "": rows from before tracing (or with it off) have no trace, and adding a
    # nullable column rewrites nothing.
    trace_id = models.CharField(
        max_length=32, null=True, blank=True, help_text="The call's OpenTelemetry trace id (32 hex digits)."
    )
    connection = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="The user's connection the call acted with: provider, connection id and account.",
    )
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-started_at", "-id"], name="invocation_tenant_recent"),
            models.Index(fields=["tenant", "tool_name", "-started_at"], name="invocation_tenant_tool"),
            models.Index(fields=["tenant", "outcome", "-started_at"], name="invocation_tenant_outcome"),
            models.Index(fields=["tenant", "key_id", "-started_at"], name="invocation_tenant_key"),
            # Partial: API-key calls (most calls) leave these empty, and nobody looks for "".
            models.Index(
                fields=["tenant", "oauth_subject", "-started_at"],
                name="invocation_oauth_subject",
                condition=~models.Q(oauth_subject=""),
            ),
            models.Index(
                fields=["tenant", "oauth_client", "-started_at"],
                name="invocation_oauth_client",
                condition=~models.Q(oauth_client=""),
            ),
            models.Index(fields=["started_at"], name="invocation_started"),
            models.Index(
                fields=["tenant", "confirmation", "-started_at"],
                name="invocation_tenant_confirm",
                condition=~models.Q(confirmation=""),
            ),
        ]
        constraints = [models.UniqueConstraint(fields=["call_id"], name="audit_invocation_call_id_key")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.outcome} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class QuarantinedInvocation(models.Model):
    """An invocation row the database refused (kept as the journal carried it, with why).

    The audit writer never lets one bad row hold up the others: a batch that fails is
    written row by row, and a row that still fails lands here. Operators see these in the
    admin and the console (``/console/quarantine/``, scoped by the row's tenant) and count
    them in ``/metrics``; the payload is stored as text the database can hold.
    """

    journal_id = models.CharField(max_length=40, help_text="The row's entry id in the Redis journal.")
    # Not a foreign key: a row whose tenant was deleted meanwhile is one reason to be here.
    tenant_id = models.BigIntegerField(null=True, blank=True, help_text="The row's tenant, when it could be read.")
    payload = models.TextField()
    error = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant_id", "-created_at"], name="audit_quarantine_tenant_idx")]

    def __str__(self) -> str:
        return f"quarantined invocation {self.journal_id}: {self.error[:80]}"


class AuditEvent(models.Model):
    """Who changed what, when, from where, with a field-level diff. Append-only."""

    class Source(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "REST API"
        COMMAND = "command", "Management command"
        MCP = "mcp", "MCP endpoint"
        OAUTH = "oauth", "Authorization server"
        SYSTEM = "system", "System (shell, worker)"

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        UPDATED = "updated", "Updated"
        DELETED = "deleted", "Deleted"

    # No database constraint: a tenant's audit trail outlives the tenant (its deletion, and the
    # deletions it cascades to, are recorded while the tenant row is going away).
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        help_text="The tenant the object belongs to; empty for platform objects. Kept after the tenant is deleted.",
    )
    tenant_slug = models.CharField(max_length=64, blank=True)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=200, blank=True)
    # Changes an OAuth client caused or that concern one (a user authorizing or revoking it).
    oauth_subject = models.CharField(max_length=255, blank=True)
    oauth_client = models.CharField(max_length=255, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.SYSTEM)
    action = models.CharField(max_length=16, choices=Action.choices)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    changes = models.JSONField(default=dict, blank=True, help_text="field → [before, after], secrets redacted.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at", "-id"], name="auditevent_tenant_recent")]

    def __str__(self) -> str:
        return f"{self.actor_label or 'system'} {self.action} {self.object_type} {self.object_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise PermissionError("Audit events are append-only; they cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError("Audit events are append-only; they cannot be deleted.")
