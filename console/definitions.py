"""The console's pending definitions: what imported tools' sources (upstream MCP servers,
OpenAPI documents) offer and waits for approval, with its diff; approved or rejected here by
those who may change the tool (admins and owners of its tenant), through the pinning service.
Operators see the list; clients keep the pinned definitions until a decision."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse, reverse_lazy
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console.access import CONSOLE_ROLE, may_use_console, operated_tenant_ids
from console.views import operator_view
from tenants.scope import TenantScope, tenant_scope
from tools_app.catalog.models import PendingDefinition
from tools_app.catalog.pinning import (
    DefinitionDecisionRefused,
    may_decide,
    pending_definition_decide,
    pending_definitions_in,
    shown,
)

RECENT_DECISIONS = 20
LISTED = 200  # pending proposals on the page (oldest first); more wait their turn


def _operated(scope: TenantScope) -> Any:
    return pending_definitions_in(scope, CONSOLE_ROLE, include_inactive=True)


@operator_view
def definition_list(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    pending = _operated(scope).filter(status=PendingDefinition.Status.PENDING).order_by("created_at", "id")
    rows = [
        {
            "pending": row,
            "may_decide": may_decide(scope, row),
            "diff": [
                {"field": name, "pinned": shown(pair[0]), "proposed": shown(pair[1])}
                for name, pair in sorted(row.diff.items())
            ],
        }
        for row in pending[:LISTED]
    ]
    decided = _operated(scope).exclude(status=PendingDefinition.Status.PENDING).order_by("-decided_at", "-id")
    context = {
        "scope": scope,
        "section": "definitions",
        "tenant_count": len(operated_tenant_ids(scope)),
        "rows": rows,
        "decided": decided[:RECENT_DECISIONS],
        "notice": request.GET.get("notice", "")[:300],
    }
    return TemplateResponse(request, "console/definitions.html", context)


@login_required(login_url=reverse_lazy("console:login"))
@never_cache
@require_POST
def definition_decision(request: HttpRequest, pk: int) -> HttpResponse:
    scope = tenant_scope(request)
    if not may_use_console(scope):
        return TemplateResponse(request, "console/no_access.html", {}, status=403)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        return HttpResponse("decision must be approve or reject", status=400, content_type="text/plain")
    pending = _operated(scope).filter(pk=pk).first()
    if pending is None:
        return _back("No such pending definition.")
    if not may_decide(scope, pending):
        return _back(f"Approving or rejecting {pending.tool.name} needs the admin role in its tenant.")
    try:
        decided = pending_definition_decide(pending_id=pending.pk, approve=decision == "approve", user=request.user)
    except DefinitionDecisionRefused as exc:
        return _back(str(exc))
    except ValidationError as exc:
        return _back(f"{pending.tool.name}: {'; '.join(exc.messages)}")
    verb = "Approved" if decided.status == PendingDefinition.Status.APPROVED else "Rejected"
    return _back(f"{verb} the new definition of {pending.tool.name}.")


def _back(notice: str) -> HttpResponse:
    return redirect(f"{reverse('console:definitions')}?{urlencode({'notice': notice})}")
