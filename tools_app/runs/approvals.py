"""Operator approvals (confirmation policy ``operator``): a call waits until an operator of
its tenant approves or denies it in the console, or its tool's timeout ends the wait.

The row is the approval's state, in the database where every process and the console see
it; a decision is a conditional update (one decision wins, a late one changes nothing),
then a push on the approval's Redis list, which wakes the call wherever it waits (an ASGI
process holding its stream, or a worker running it as a task).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from audit.redaction import redact_arguments
from mcp_platform.redis_clients import async_redis, sync_redis
from tenants.models import ApiKey
from tenants.scope import Role, TenantScope
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.context import Caller
from tools_app.runs.models import Approval

# A waiter blocks on the list for at most this long before it looks again (below the Redis
# client's socket timeout, so a quiet wait never reads as a dead connection).
WAKE_SECONDS = 5
# Operators who may approve: the console's own role and above.
APPROVER_ROLE = Role.OPERATOR
# How long an approval is kept once its call stopped waiting (the console shows recent
# decisions; the invocation log keeps who decided for as long as it keeps the call).
KEEP_DECIDED = timedelta(days=1)


class ApprovalRefused(Exception):
    """The user may not decide this approval (not theirs to see, already decided, their own call)."""


def _decision_key(approval_id: str) -> str:
    return f"toolbay:approval:{approval_id}"


def _requester_user_id(caller: Caller) -> int | None:
    """The account behind the credential: the key's creator, or the OAuth user of that name."""
    if caller.key_id is not None:
        return ApiKey.objects.filter(pk=caller.key_id).values_list("created_by_id", flat=True).first()
    if caller.oauth_subject:
        users = get_user_model().objects.filter(username=caller.oauth_subject)
        return users.values_list("pk", flat=True).first()
    return None


def approval_open(*, caller: Caller, tool: ToolSpec, arguments: dict[str, Any]) -> Approval:
    """The pending approval of this call: a new one, or the one its run already opened (a
    worker that runs the call again after a restart waits on the same approval)."""
    if caller.run_id:
        existing = Approval.objects.filter(run_id=caller.run_id).first()
        if existing is not None:
            return existing
    return Approval.objects.create(
        tenant_id=caller.tenant_id,
        tool_id=tool.id,
        tool_name=tool.name,
        tool_title=tool.title,
        description=tool.description,
        arguments=redact_arguments(arguments, tool.input_schema),
        requested_by=caller.label,
        requester_user_id=_requester_user_id(caller),
        run_id=caller.run_id,
        expires_at=timezone.now() + timedelta(seconds=tool.timeout_seconds),
    )


def approval_expire(approval_id: str) -> bool:
    """The call stopped waiting; False when a decision came first."""
    return bool(
        Approval.objects.filter(pk=approval_id, status=Approval.Status.PENDING).update(status=Approval.Status.EXPIRED)
    )


def approval_decide(*, scope: TenantScope, user: Any, approval_id: str, approve: bool) -> Approval:
    """An operator's decision. Raises ApprovalRefused when the approval is not the user's to
    decide (missing and foreign alike), was decided already, or is their own call."""
    approval = approvals_in(scope).filter(pk=approval_id).first()
    if approval is None:
        raise ApprovalRefused("No such approval.")
    if approval.requester_user_id is not None and approval.requester_user_id == user.pk:
        raise ApprovalRefused("This is your own call: another operator must decide it.")
    status = Approval.Status.APPROVED if approve else Approval.Status.DENIED
    decided = Approval.objects.filter(pk=approval.pk, status=Approval.Status.PENDING).update(
        status=status, decided_by=user, decided_at=timezone.now()
    )
    if not decided:
        raise ApprovalRefused("This call was decided already, or stopped waiting.")
    client = sync_redis()
    client.rpush(_decision_key(approval.pk), status)
    client.expire(_decision_key(approval.pk), WAKE_SECONDS * 12)
    approval.refresh_from_db()
    return approval


def approvals_purge_expired() -> int:
    """Delete approvals whose wait ended more than KEEP_DECIDED ago; how many went."""
    deleted, _ = Approval.objects.filter(expires_at__lt=timezone.now() - KEEP_DECIDED).delete()
    return deleted


def approvals_in(scope: TenantScope) -> QuerySet[Approval]:
    """The approvals of the tenants the user operates (every tenant for platform admins)."""
    return Approval.objects.filter(scope.within("tenant", APPROVER_ROLE, include_inactive=True))


def pending_approvals(scope: TenantScope) -> QuerySet[Approval]:
    rows = approvals_in(scope).filter(status=Approval.Status.PENDING, expires_at__gt=timezone.now())
    return rows.select_related("tenant").order_by("created_at", "id")


async def approval_wait(approval: Approval) -> Approval:
    """Wait for the decision on ``approval``; the row as decided. Cancelling the wait (the
    tool's timeout, the client's cancel) expires the approval unless a decision came first."""
    key = _decision_key(approval.pk)
    redis = async_redis()
    try:
        while approval.status == Approval.Status.PENDING:
            await redis.blpop([key], timeout=WAKE_SECONDS)
            await approval.arefresh_from_db()
        return approval
    finally:
        if approval.status == Approval.Status.PENDING:
            await asyncio.shield(sync_to_async(approval_expire)(approval.pk))
