"""The console's pending approvals (confirmation policy ``operator``): calls waiting for an
operator of their tenant, listed live, approved or denied here.

The page polls its own list (a server-rendered fragment) so a new call shows up within
seconds without a reload; a decision is a POST that goes through the approvals service,
which wakes the waiting call wherever it runs.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse, reverse_lazy
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console.access import may_use_console, operated_tenant_ids
from console.views import operator_view
from tenants.scope import TenantScope, tenant_scope
from tools_app.runs.approvals import ApprovalRefused, approval_decide, approvals_in, pending_approvals

RECENT_DECISIONS = 20


def _rows_context(scope: TenantScope) -> dict[str, Any]:
    rows = [
        {"approval": approval, "arguments": json.dumps(approval.arguments, indent=2, ensure_ascii=False)}
        for approval in pending_approvals(scope)
    ]
    return {"pending": rows}


@operator_view
def approval_list(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    decided = approvals_in(scope).exclude(status="pending").select_related("tenant", "decided_by")
    context = {
        "scope": scope,
        "section": "approvals",
        "tenant_count": len(operated_tenant_ids(scope)),
        "decided": decided.order_by("-created_at")[:RECENT_DECISIONS],
        "notice": request.GET.get("notice", "")[:200],
        **_rows_context(scope),
    }
    return TemplateResponse(request, "console/approvals.html", context)


@operator_view
def approval_rows(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    """The pending rows alone: what the page fetches to stay live."""
    return TemplateResponse(request, "console/_approval_rows.html", _rows_context(scope))


@login_required(login_url=reverse_lazy("console:login"))
@never_cache
@require_POST
def approval_decision(request: HttpRequest, pk: str) -> HttpResponse:
    scope = tenant_scope(request)
    if not may_use_console(scope):
        return TemplateResponse(request, "console/no_access.html", {}, status=403)
    decision = request.POST.get("decision")
    if decision not in ("approve", "deny"):
        return HttpResponse("decision must be approve or deny", status=400, content_type="text/plain")
    try:
        approval = approval_decide(scope=scope, user=request.user, approval_id=pk, approve=decision == "approve")
    except ApprovalRefused as exc:
        return _back(str(exc))
    verb = "Approved" if approval.status == "approved" else "Denied"
    return _back(f"{verb} {approval.tool_name}.")


def _back(notice: str) -> HttpResponse:
    return redirect(f"{reverse('console:approvals')}?{urlencode({'notice': notice})}")
