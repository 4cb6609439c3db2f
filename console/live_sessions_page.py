"""The live sessions page in the admin (``/admin/live-sessions/``): staff with an operator,
admin or owner membership see their tenants' open MCP sessions; superusers see all (the
console's rule, ``console.access.operated_tenants``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from console.access import operated_tenants
from console.live_sessions import live_sessions_of, session_end
from tenants.scope import tenant_scope


def live_sessions(request: HttpRequest) -> HttpResponse:
    # Routed through admin.site.admin_view: a logged-in staff user.
    scope = tenant_scope(request)
    if request.method == "POST":
        tenant = operated_tenants(scope, request.POST.get("tenant", "")).first()
        # Another tenant's session, or none at all: the same 404.
        if tenant is None or not session_end(tenant=tenant, session_id=request.POST.get("session", "")):
            raise Http404("No such session")
        messages.success(request, "Session ended.")
        return redirect("operator-live-sessions")
    context = {
        **admin.site.each_context(request),
        "rows": live_sessions_of(list(operated_tenants(scope))),
        "idle_seconds": settings.MCP_SESSION_IDLE_SECONDS,
    }
    return TemplateResponse(request, "operator/live_sessions.html", context)
