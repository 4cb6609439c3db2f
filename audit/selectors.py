"""Reads of the audit log as the REST API serves it: the invocation log and the change audit
of the tenants a user operates, newest first.

Operators, admins and owners read their active tenants' rows; platform admins read every
row, platform-wide change events (which belong to no tenant) included. The console scopes
the same rows its own way (``console.access``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Model, QuerySet

from audit.models import AuditEvent, Invocation
from tenants.models import Membership, Tenant
from tenants.scope import TenantScope

READER_ROLE = Membership.Role.OPERATOR

_Row = TypeVar("_Row", bound=Model)


def _narrowed(
    rows: QuerySet[_Row], time_field: str, tenant_slug: str | None, since: datetime | None, until: datetime | None
) -> QuerySet[_Row]:
    if tenant_slug is not None:
        # A subquery rather than a join: change events keep a deleted tenant's id.
        rows = rows.filter(tenant_id__in=Tenant.objects.filter(slug=tenant_slug).values("pk"))
    if since is not None:
        rows = rows.filter(**{f"{time_field}__gte": since})
    if until is not None:
        rows = rows.filter(**{f"{time_field}__lt": until})
    return rows


def _matching(rows: QuerySet[_Row], **fields: Any) -> QuerySet[_Row]:
    given = {name: value for name, value in fields.items() if value is not None}
    return rows.filter(**given) if given else rows


def invocations_in(
    scope: TenantScope,
    *,
    tenant_slug: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    tool_name: str | None = None,
    key_id: int | None = None,
    outcome: str | None = None,
    session_id: str | None = None,
    run_id: str | None = None,
    kind: str | None = None,
    protocol_version: str | None = None,
    oauth_subject: str | None = None,
    oauth_client: str | None = None,
    confirmation: str | None = None,
) -> QuerySet[Invocation]:
    """Calls, reads and prompts of the tenants the user operates, with their tenant;
    ``since``/``until`` bound ``started_at``."""
    rows = Invocation.objects.filter(scope.within("tenant", READER_ROLE)).select_related("tenant")
    rows = _narrowed(rows, "started_at", tenant_slug, since, until)
    return _matching(
        rows,
        tool_name=tool_name,
        key_id=key_id,
        outcome=outcome,
        session_id=session_id,
        run_id=run_id,
        kind=kind,
        protocol_version=protocol_version,
        oauth_subject=oauth_subject,
        oauth_client=oauth_client,
        confirmation=confirmation,
    )


def audit_events_in(
    scope: TenantScope,
    *,
    tenant_slug: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    action: str | None = None,
    source: str | None = None,
    actor: str | None = None,
    oauth_subject: str | None = None,
    oauth_client: str | None = None,
) -> QuerySet[AuditEvent]:
    """Changes in the tenants the user operates; ``actor`` matches part of the actor's name,
    ``since``/``until`` bound ``created_at``."""
    rows = AuditEvent.objects.filter(scope.within("tenant", READER_ROLE))
    rows = _narrowed(rows, "created_at", tenant_slug, since, until)
    rows = _matching(
        rows,
        object_type=object_type,
        object_id=object_id,
        action=action,
        source=source,
        oauth_subject=oauth_subject,
        oauth_client=oauth_client,
    )
    return rows if actor is None else rows.filter(actor_label__icontains=actor)
