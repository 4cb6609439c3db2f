"""The packaged servers page in the admin (``/admin/packaged-instances/``): every instance of a
packaged MCP server (state, tenant, memory, uptime, restarts, last error) with stop and restart.
Staff with an operator, admin or owner membership see their tenants' instances; superusers see
all (the console's rule, ``console.access``)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from console.access import operated_tenant_ids, operated_tenants
from tenants.scope import tenant_scope
from tools_app.backends.packaged.operations import instance_control, instances_of


def packaged_instances(request: HttpRequest) -> HttpResponse:
    # Routed through admin.site.admin_view: a logged-in staff user.
    scope = tenant_scope(request)
    tenant_ids = None if scope.platform else operated_tenant_ids(scope)
    if request.method == "POST":
        action = request.POST.get("action", "")
        if not instance_control(scope=request.POST.get("scope", ""), action=action, tenant_ids=tenant_ids):
            raise Http404("No such instance")  # another tenant's, or none at all: the same 404
        messages.success(request, f"Asked its runner to {action} the instance.")
        return redirect("operator-packaged-instances")
    slugs: dict[int, str] = dict(operated_tenants(scope).values_list("pk", "slug"))
    rows = [{**row, "tenant_slug": slugs.get(int(row.get("tenant") or 0), "-")} for row in instances_of(tenant_ids)]
    context = {**admin.site.each_context(request), "rows": rows}
    return TemplateResponse(request, "operator/packaged_instances.html", context)
