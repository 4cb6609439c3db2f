"""Background runs: one row per tool call executed on a Celery worker (a background call or
an MCP task), the call's durable state."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models

from tenants.models import Tenant
from tools_app.catalog.models import Tool

if TYPE_CHECKING:
    from tools_app.catalog.spec import ToolSpec


def new_run_id() -> str:
    # Doubles as the MCP taskId, which must be unguessable.
    return secrets.token_urlsafe(18)


class ToolRun(models.Model):
    """One tool call executed on a Celery worker: a background call or an MCP task.

    The row is the call's durable state: a worker that dies, a client that goes away or an
    ASGI process that restarts all leave it here, and terminal states never change.
    """

    class Status(models.TextChoices):
        WORKING = "working", "Working"
        INPUT_REQUIRED = "input_required", "Input required"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.WORKING, Status.INPUT_REQUIRED)
    # The tool as the call was accepted for, when the run was read from its live state
    # (tools_app/runs/store.py); None: read from the row, look the tool up.
    spec: ToolSpec | None = None

    id = models.CharField(primary_key=True, max_length=32, default=new_run_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_runs")
    subject = models.CharField(max_length=64, help_text="The credential the run is bound to.")
    # How the invocation log names the caller (the run outlives the request that started it).
    credential_label = models.CharField(max_length=150, blank=True)
    oauth_subject = models.CharField(max_length=255, blank=True)
    oauth_client = models.CharField(max_length=255, blank=True)
    # Whom the caller's connections belong to on the worker (the connect link a run hands out
    # is for the Toolbay user behind the caller's token). The token itself is never queued.
    oauth_issuer = models.CharField(max_length=500, blank=True)
    grant_id = models.CharField(max_length=64, blank=True)
    tool = models.ForeignKey(Tool, null=True, on_delete=models.SET_NULL, related_name="runs")
    tool_name = models.CharField(max_length=128)
    tool_version = models.PositiveIntegerField()
    arguments = models.JSONField(default=dict)
    is_task = models.BooleanField(default=False, help_text="Created by a task-augmented tools/call.")
    # Where the call's messages go: the MCP session, its POST stream and the request's id.
    session_id = models.CharField(max_length=128)
    protocol_version = models.CharField(max_length=16, blank=True, help_text="The MCP revision of the call.")
    # 2026-07-28 multi-round calls: the client's answers so far (the handler runs again with
    # them) and, while a task waits for its client, the requests still unanswered, by key.
    input_responses = models.JSONField(default=dict, blank=True)
    input_requests = models.JSONField(default=dict, blank=True)
    stream_id = models.CharField(max_length=32)
    request_id = models.JSONField(null=True)
    progress_token = models.JSONField(null=True)
    client_capabilities = models.JSONField(default=dict)
    # The confirmation policy that applied to the caller when the call was made (rules can
    # tighten the tool's per caller; the worker cannot tell the caller's rules apart).
    confirmation = models.CharField(max_length=16, default="destructive")
    log_level = models.CharField(max_length=16, default="info")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.WORKING)
    status_message = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(
        null=True, blank=True, help_text="A JSON-RPC error, when the call failed as a protocol error."
    )
    attempts = models.PositiveIntegerField(default=0)
    worker_pid = models.IntegerField(null=True, blank=True)
    # The heartbeat id of the worker process running it now ("" while queued): the run is
    # recovered when that worker stops beating (tools_app/runs/recovery.py).
    worker_id = models.CharField(max_length=128, blank=True, default="")
    ttl_ms = models.PositiveIntegerField(null=True, blank=True)
    # How many times the run's state changed (tools_app/runs/store.py): the row is written
    # behind, and the writer never lets an older state overwrite a newer one.
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["tenant", "subject", "is_task", "-created_at"], name="toolrun_owner_recent"),
            models.Index(fields=["expires_at"], name="toolrun_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} run {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status not in self.ACTIVE


class Approval(models.Model):
    """A call waiting for an operator of its tenant to approve or deny it (policy ``operator``).

    The call holds on to it (on its stream, or as a task on a worker) until an operator
    decides in the console or the tool's timeout ends the wait; the decision reaches the
    waiting process through Redis, the row is what every process and the console read.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for an operator"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        EXPIRED = "expired", "No decision in time"

    id = models.CharField(primary_key=True, max_length=32, default=new_run_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals")
    tool = models.ForeignKey(Tool, null=True, on_delete=models.SET_NULL, related_name="approvals")
    tool_name = models.CharField(max_length=128)
    tool_title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    arguments = models.JSONField(default=dict, help_text="With sensitive fields redacted.")
    requested_by = models.CharField(max_length=150, help_text="The credential that made the call.")
    # The person behind the credential (the key's creator, the OAuth user), who may not
    # approve their own call; None when no account is known.
    requester_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    run_id = models.CharField(max_length=32, blank=True, help_text="The background run or task that waits.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [models.Index(fields=["tenant", "status", "-created_at"], name="approval_tenant_status")]

    def __str__(self) -> str:
        return f"{self.tool_name} approval {self.id} ({self.status})"
