"""The operator console: invocation log, change audit, charts, exports.

Views parse the query string (``console.filters``), start from the signed-in user's
``TenantScope`` through ``console.access`` and hand the queryset to a selector; nothing here
reads another tenant's rows, because nothing here starts anywhere but the scope.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import reverse, reverse_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console import charts, stats
from console.access import (
    access_audit_event,
    access_invocation,
    api_keys,
    audit_events,
    invocations,
    may_use_console,
    operated_tenant_ids,
    operated_tenants,
    quarantined_invocations,
    slug_finder,
)
from console.exports import AUDIT_EVENTS, INVOCATIONS, export_response
from console.filters import ChangeFilterForm, InvocationFilterForm
from console.keyset import Cursor, page_of
from tenants.scope import TenantScope, tenant_scope

PAGE_ROWS = 50
LIST_FIELDS = (
    "id", "tenant_id", "key_id", "key_label", "session_id", "kind", "tool_name", "tool_version", "outcome",
    "error_message", "duration_ms", "run_id", "is_task", "started_at",
)  # fmt: skip
TOOL_SUGGESTIONS = 2000  # recent rows whose tool names fill the tool filter's suggestions

View = Callable[..., HttpResponseBase]


def operator_view(view: View) -> View:
    """Signed in, operating at least one tenant (or a superuser); no caching of the page."""

    @login_required(login_url=reverse_lazy("console:login"))
    @never_cache
    @require_GET
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        scope = tenant_scope(request)
        if not may_use_console(scope):
            return TemplateResponse(request, "console/no_access.html", {}, status=403)
        return view(request, scope, *args, **kwargs)

    return wrapper


class ConsoleLoginView(LoginView):
    template_name = "console/login.html"
    redirect_authenticated_user = True

    def get_default_redirect_url(self) -> str:
        return reverse("console:dashboard")


def _context(request: HttpRequest, scope: TenantScope, section: str, **extra: Any) -> dict[str, Any]:
    return {"scope": scope, "section": section, "tenant_count": len(operated_tenant_ids(scope)), **extra}


def _label(form: InvocationFilterForm | ChangeFilterForm) -> str:
    tenant = form.cleaned_data.get("tenant") if form.is_valid() else None
    return tenant.slug if tenant is not None else "all"


@operator_view
def dashboard(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    window = request.GET.get("window", "hour")
    if window not in stats.WINDOWS:
        window = "hour"
    tenants = list(operated_tenants(scope))
    filters = {"tenant": request.GET.get("tenant", ""), "tool": request.GET.get("tool", "")}
    form = InvocationFilterForm(filters, scope, tenants)
    rows = form.apply(invocations(scope)) if form.is_valid() else invocations(scope).none()
    scope_key = "all" if scope.platform else ",".join(str(tenant.pk) for tenant in tenants)
    filters_key = form.querystring() if form.is_valid() else "invalid"
    data = stats.overview_cached(rows, window, cache_key=f"{scope_key}|{filters_key}")
    context = _context(
        request,
        scope,
        "dashboard",
        form=form,
        window=window,
        windows=list(stats.WINDOWS),
        data=data,
        calls_chart=charts.calls_per_minute_chart(data),
        legend=charts.legend(data.outcomes),
        latency_chart=charts.latency_chart(data.latency),
        errors_chart=charts.errors_chart(data.errors),
        declines_chart=charts.declines_chart(data.confirmations),
        confirmation_legend=charts.confirmation_legend(),
        error_rate=(100.0 * data.failed / data.total) if data.total else 0.0,
    )
    return TemplateResponse(request, "console/dashboard.html", context)


def _page_context(request: HttpRequest, rows: Any, time_field: str) -> dict[str, Any]:
    after, before = Cursor.decode(request.GET.get("after")), Cursor.decode(request.GET.get("before"))
    page = page_of(rows, time_field, size=PAGE_ROWS, after=after, before=None if after else before)
    return {
        "rows": page.rows,
        "newer": page.newer.encode() if page.newer else "",
        "older": page.older.encode() if page.older else "",
        "paged": after is not None or before is not None,
    }


@operator_view
def invocation_list(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    tenants = list(operated_tenants(scope))
    form = InvocationFilterForm(request.GET, scope, tenants)
    if not form.is_valid():
        context = _context(request, scope, "invocations", form=form, rows=[], tools=[])
        return TemplateResponse(request, "console/invocations.html", context, status=400)
    rows = form.apply(invocations(scope)).only(*LIST_FIELDS)
    recent = form.apply_common(invocations(scope)).order_by("-started_at", "-id")[:TOOL_SUGGESTIONS]
    tools = sorted(set(recent.values_list("tool_name", flat=True)) - {""})
    keys = api_keys(scope).select_related("tenant").order_by("tenant__slug", "name")
    if form.cleaned_data.get("tenant") is not None:
        keys = keys.filter(tenant=form.cleaned_data["tenant"])
    context = _context(
        request,
        scope,
        "invocations",
        form=form,
        tools=tools,
        keys=keys[:500],
        querystring=form.querystring(),
        **_page_context(request, rows, "started_at"),
    )
    slug_of = slug_finder(tenants)
    for row in context["rows"]:
        row.tenant_slug = slug_of(row.tenant_id)
    return TemplateResponse(request, "console/invocations.html", context)


@operator_view
def invocation_detail(request: HttpRequest, scope: TenantScope, pk: int) -> HttpResponse:
    row = access_invocation(scope, pk)
    context = _context(
        request,
        scope,
        "invocations",
        row=row,
        tenant_slug=row.tenant.slug,
        arguments=json.dumps(row.arguments, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder),
        trace_url=settings.TOOLBAY_TRACE_URL.replace("{trace_id}", row.trace_id)
        if settings.TOOLBAY_TRACE_URL and row.trace_id
        else "",
    )
    return TemplateResponse(request, "console/invocation_detail.html", context)


@operator_view
def invocation_export(request: HttpRequest, scope: TenantScope, kind: str) -> HttpResponseBase:
    tenants = list(operated_tenants(scope))
    form = InvocationFilterForm(request.GET, scope, tenants)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    rows = form.apply(invocations(scope))
    slug_of = slug_finder(tenants)
    return export_response(request, INVOCATIONS, rows, kind=kind, slug_of=slug_of, label=_label(form))


@operator_view
def quarantine_list(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    """Invocation rows the audit writer quarantined (the database refused them), newest first."""
    context = _context(
        request, scope, "quarantine", **_page_context(request, quarantined_invocations(scope), "created_at")
    )
    slug_of = slug_finder(operated_tenants(scope))
    for row in context["rows"]:
        row.tenant_slug = slug_of(row.tenant_id)
    return TemplateResponse(request, "console/quarantine.html", context)


@operator_view
def change_list(request: HttpRequest, scope: TenantScope) -> HttpResponse:
    form = ChangeFilterForm(request.GET, scope, list(operated_tenants(scope)))
    if not form.is_valid():
        context = _context(request, scope, "changes", form=form, rows=[])
        return TemplateResponse(request, "console/changes.html", context, status=400)
    rows = form.apply(audit_events(scope)).defer("changes")
    context = _context(
        request,
        scope,
        "changes",
        form=form,
        querystring=form.querystring(),
        **_page_context(request, rows, "created_at"),
    )
    return TemplateResponse(request, "console/changes.html", context)


@operator_view
def change_detail(request: HttpRequest, scope: TenantScope, pk: int) -> HttpResponse:
    row = access_audit_event(scope, pk)
    diff = [
        {"field": name, "before": _shown(values, 0), "after": _shown(values, 1)}
        for name, values in sorted(row.changes.items())
    ]
    context = _context(request, scope, "changes", row=row, diff=diff)
    return TemplateResponse(request, "console/change_detail.html", context)


def _shown(values: Any, index: int) -> str:
    if not isinstance(values, list | tuple) or len(values) != 2:
        return json.dumps(values, ensure_ascii=False) if index == 1 else ""
    value = values[index]
    return "—" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@operator_view
def change_export(request: HttpRequest, scope: TenantScope, kind: str) -> HttpResponseBase:
    tenants = list(operated_tenants(scope))
    form = ChangeFilterForm(request.GET, scope, tenants)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    rows = form.apply(audit_events(scope))
    slug_of = slug_finder(tenants)
    return export_response(request, AUDIT_EVENTS, rows, kind=kind, slug_of=slug_of, label=_label(form))
