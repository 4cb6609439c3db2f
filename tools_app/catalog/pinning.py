"""Pinned definitions: what clients see of an imported tool changes only when an admin approves.

A tool's own fields are its pinned (approved) definition. When its source offers a different
one (an upstream MCP server's refresh, a re-import of an OpenAPI document), ``definition_offer``
either applies it (the source is trusted, or an admin running the import approved it) or parks
it as a ``PendingDefinition`` with a diff; clients keep the pinned definition meanwhile. An
admin then approves (the tool is updated through the catalog services, so the change is
audited and ``notifications/tools/list_changed`` goes out on every process) or rejects it.

A rejected definition is not parked again while the source keeps offering exactly it; a
different one is. A source that goes back to the pinned definition withdraws its proposal.

Locks are taken tool first, then its proposals, by every writer here, so a refresh and an
approval of the same tool cannot deadlock; two decisions on one proposal serialize on those
locks and the second finds it decided.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tenants.scope import Role, TenantScope
from tools_app.catalog.models import PendingDefinition, Tool
from tools_app.catalog.services import catalog_entry_check, catalog_entry_update

# Who may approve or reject: those who may change the tool (admins and owners of its tenant;
# platform admins for platform tools).
DECIDER_ROLE = Role.ADMIN

Offered = Literal["unchanged", "applied", "parked", "waiting", "rejected"]


class DefinitionDecisionRefused(Exception):
    """The proposal cannot be decided (already decided, or gone); the message says why."""


def definition_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _supersede(tool: Tool, note: str) -> None:
    pending = PendingDefinition.objects.select_for_update().filter(tool=tool, status=PendingDefinition.Status.PENDING)
    for row in pending:
        row.status = PendingDefinition.Status.SUPERSEDED
        row.decided_at = timezone.now()
        row.note = note[:300]
        row.save(update_fields=["status", "decided_at", "note"])


@transaction.atomic
def definition_offer(
    *,
    tool: Tool,
    fields: dict[str, Any],
    source_kind: str,
    source_id: int,
    source_name: str,
    approve: bool,
) -> Offered:
    """The source's current definition of ``tool`` (its values of the pinned fields).

    Answers what became of it: ``unchanged`` (it is the pinned one), ``applied`` (``approve``:
    the tool now has it), ``parked`` (a new proposal waits), ``waiting`` (the same proposal
    already waits) or ``rejected`` (an admin rejected exactly this one). Raises ValidationError
    when the catalog would refuse the definition (nothing is parked then).
    """
    tool = Tool.objects.select_for_update().get(pk=tool.pk)
    changed = {name: value for name, value in fields.items() if getattr(tool, name) != value}
    if not changed:
        _supersede(tool, "The source offers the pinned definition again.")
        return "unchanged"
    if approve:
        catalog_entry_update(entry=tool, changes=changed)
        _supersede(tool, "A newer definition was applied directly.")
        return "applied"
    digest = definition_hash(changed)
    proposals = PendingDefinition.objects.select_for_update().filter(tool=tool)
    waiting = proposals.filter(status=PendingDefinition.Status.PENDING).first()
    if waiting is not None and waiting.sha256 == digest:
        return "waiting"
    last_decided = (
        proposals.filter(status__in=[PendingDefinition.Status.APPROVED, PendingDefinition.Status.REJECTED])
        .order_by("-decided_at", "-id")
        .first()
    )
    if last_decided is not None and (last_decided.status, last_decided.sha256) == ("rejected", digest):
        return "rejected"
    candidate = copy.copy(tool)
    for name, value in changed.items():
        setattr(candidate, name, value)
    catalog_entry_check(candidate)
    _supersede(tool, "The source offered a newer definition.")
    PendingDefinition.objects.create(
        tool=tool,
        tenant_id=tool.tenant_id,
        source_kind=source_kind,
        source_id=source_id,
        source_name=source_name[:200],
        proposed=changed,
        diff={name: [getattr(tool, name), value] for name, value in changed.items()},
        sha256=digest,
    )
    return "parked"


@transaction.atomic
def pending_definition_decide(
    *, pending_id: int, approve: bool, user: AbstractBaseUser | AnonymousUser | None
) -> PendingDefinition:
    """Approve (the tool takes the proposed fields) or reject a pending proposal; the caller
    has checked the user may (``may_decide``). Raises
    DefinitionDecisionRefused when it was decided already or is gone, ValidationError when the
    catalog refuses the definition now."""
    tool_id = PendingDefinition.objects.filter(pk=pending_id).values_list("tool_id", flat=True).first()
    if tool_id is None:
        raise DefinitionDecisionRefused("No such pending definition.")
    tool = Tool.objects.select_for_update().filter(pk=tool_id).first()
    pending = PendingDefinition.objects.select_for_update().filter(pk=pending_id).first()
    if tool is None or pending is None:
        raise DefinitionDecisionRefused("No such pending definition.")
    if pending.status != PendingDefinition.Status.PENDING:
        who = f" by {pending.decided_by.get_username()}" if pending.decided_by is not None else ""
        when = f" at {pending.decided_at:%Y-%m-%d %H:%M:%S} UTC" if pending.decided_at else ""
        raise DefinitionDecisionRefused(
            f"This definition of {tool.name} was {pending.get_status_display().lower()} already{who}{when}."
        )
    if approve:
        changes = {name: value for name, value in pending.proposed.items() if getattr(tool, name) != value}
        if changes:
            catalog_entry_update(entry=tool, changes=changes)
    pending.status = PendingDefinition.Status.APPROVED if approve else PendingDefinition.Status.REJECTED
    pending.decided_at = timezone.now()
    pending.decided_by = user if user is not None and user.is_authenticated else None  # type: ignore[assignment]
    pending.save(update_fields=["status", "decided_at", "decided_by"])
    return pending


# --- reads ---------------------------------------------------------------------------------


def pending_definitions_in(
    scope: TenantScope, minimum: str = Role.VIEWER, *, include_inactive: bool = False
) -> QuerySet[PendingDefinition]:
    """Proposals of the tenants where the user holds ``minimum`` (every one, platform tools'
    included, for platform admins)."""
    rows = PendingDefinition.objects.filter(scope.within("tenant", minimum, include_inactive=include_inactive))
    return rows.select_related("tool", "tenant", "decided_by")


def tools_with_pending(tool_ids: list[int]) -> set[int]:
    """Which of these tools have a proposal waiting (one query; a source that now offers the
    pinned definition again must withdraw it)."""
    rows = PendingDefinition.objects.filter(tool_id__in=tool_ids, status=PendingDefinition.Status.PENDING)
    return set(rows.values_list("tool_id", flat=True))


def shown(value: Any) -> str:
    """A field's value as a diff shows it: text as it is, anything else as indented JSON."""
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def may_decide(scope: TenantScope, pending: PendingDefinition) -> bool:
    return scope.has_role(pending.tenant_id, DECIDER_ROLE, include_inactive=True)
