"""Admin screen of upstream MCP servers: connection settings, refresh, and publishing the
tools an upstream offers. Scoped by ``TenantScopedAdmin``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from tenants.admin import TenantScopedAdmin
from tenants.scope import tenant_scope
from tools_app.backends.upstream.federation import (
    UpstreamRefreshError,
    local_name,
    published_tools,
    upstream_publish,
    upstream_refresh,
)
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.forms import PrettyJSONField
from tools_app.catalog.pinning import tools_with_pending

PRE_STYLE = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; "
    "margin: 0; padding: 8px; max-width: 70em; overflow-x: auto;"
)


# --- upstream MCP servers ----------------------------------------------------------------------


class UpstreamServerForm(forms.ModelForm[UpstreamServer]):
    # Set by the admin: only platform admins may run a command or mark a package trusted.
    platform_admin = False

    kind = forms.ChoiceField(
        choices=UpstreamServer.Kind.choices,
        required=False,
        initial=UpstreamServer.Kind.HTTP,
        help_text="Where the server runs: at a URL, or packaged (installed and run by Toolbay, sandboxed).",
    )
    url = forms.URLField(
        label="URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="The server's Streamable HTTP endpoint, e.g. https://mcp.example.com/mcp (kind http).",
    )
    tags = PrettyJSONField(
        required=False, empty=[], rows=2, help_text='Tags for tools imported from now on, e.g. ["github"].'
    )
    command = PrettyJSONField(required=False, empty=[], rows=2, help_text='For a command: ["/path/to/program", "arg"].')
    args = PrettyJSONField(required=False, empty=[], rows=2, help_text='Arguments, e.g. ["--root", "/data"].')
    env = PrettyJSONField(required=False, empty={}, rows=3, help_text='Plain environment values: {"NAME": "value"}.')
    env_secrets = PrettyJSONField(
        required=False, empty={}, rows=3, help_text='Values from this tenant\'s secrets: {"API_KEY": "secret-name"}.'
    )
    user_credential = PrettyJSONField(
        required=False,
        empty={},
        rows=3,
        help_text='Calls act as the calling user: {"type": "connection", "provider": "github", "scopes": ["repo"]} '
        'or {"type": "token_exchange", "provider": "idp", "audience": "https://mcp.example.com"}. Empty: '
        "every call uses the credential above.",
    )
    allow_hosts = PrettyJSONField(
        required=False, empty=[], rows=2, help_text='Hosts it may reach, e.g. ["api.github.com"]; empty: no network.'
    )

    class Meta:
        model = UpstreamServer
        fields = "__all__"

    def clean_kind(self) -> str:
        return str(self.cleaned_data.get("kind") or UpstreamServer.Kind.HTTP)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.platform_admin:
            if cleaned.get("kind") == UpstreamServer.Kind.COMMAND:
                self.add_error("kind", "Only platform admins may run a command.")
            if cleaned.get("trusted"):
                self.add_error("trusted", "Only platform admins may mark a package trusted.")
        return cleaned


@admin.register(UpstreamServer)
class UpstreamServerAdmin(TenantScopedAdmin):
    form = UpstreamServerForm
    change_form_template = "admin/tools_app/upstreamserver/change_form.html"
    list_display = ("name", "scope", "source", "enabled", "tool_count", "refreshed_at", "status")
    list_filter = ("enabled", "kind", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("name", "url", "package", "tenant__slug")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    actions = ("refresh_selected",)
    readonly_fields = (
        "refreshed_at",
        "status",
        "server",
        "tools_table",
        "created_at",
        "updated_at",
        "install_state",
        "install_error",
        "integrity",
        "installed_at",
    )
    fieldsets = (
        (None, {"fields": ("tenant", "name", "kind", "url", "enabled")}),
        (
            "Packaged server (npm, PyPI, command)",
            {
                "fields": (
                    "package",
                    "version",
                    "command",
                    "args",
                    "env",
                    "env_secrets",
                    "allow_hosts",
                    "per_user",
                    "trusted",
                    "install_state",
                    "install_error",
                    "integrity",
                    "installed_at",
                )
            },
        ),
        (
            "Authentication",
            {
                "fields": ("auth", "auth_header", "secret", "user_credential"),
                "description": "The credential above lists the server's tools (import, refresh, the listener: no "
                "user is involved). With a user credential, calls send the calling user's own token instead.",
            },
        ),
        (
            "Import",
            {
                "fields": (
                    "tool_prefix",
                    "tags",
                    "publish_new_tools",
                    "auto_approve",
                    "import_resources_and_prompts",
                    "timeout_seconds",
                )
            },
        ),
        ("State", {"fields": ("refreshed_at", "status", "server", "tools_table")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.platform_admin = tenant_scope(request).platform  # type: ignore[attr-defined]
        return form

    def save_model(self, request: HttpRequest, obj: UpstreamServer, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if obj.packaged and obj.enabled:
            # A runner installs the package (once per version per machine) and starts it, and the
            # refresh lists its tools; an install that fails shows on this page (install_error).
            transaction.on_commit(lambda: self._refresh(request, obj))

    @admin.display(description="Source")
    def source(self, obj: UpstreamServer) -> str:
        if obj.kind == UpstreamServer.Kind.HTTP:
            return obj.url
        if obj.kind == UpstreamServer.Kind.COMMAND:
            return "command: " + " ".join(obj.command)[:80]
        return f"{obj.kind} {obj.package} {obj.version}" + (
            " (install failed)" if obj.install_state == "failed" else ""
        )

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant" and not tenant_scope(request).platform:
            kwargs["required"] = True
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="Tools for", ordering="tenant__slug")
    def scope(self, obj: UpstreamServer) -> str:
        return "platform" if obj.tenant_id is None else f"{obj.tenant}"

    @admin.display(description="Published tools")
    def tool_count(self, obj: UpstreamServer) -> int:
        return published_tools(obj).count()

    @admin.display(description="Last refresh")
    def status(self, obj: UpstreamServer) -> str:
        if obj.refreshed_at is None:
            return "never refreshed"
        return obj.last_error or "ok"

    @admin.display(description="Server")
    def server(self, obj: UpstreamServer) -> str:
        info = obj.server_info or {}
        if not info:
            return "-"
        return f"{info.get('name', '?')} {info.get('version', '')} (protocol {info.get('protocolVersion', '?')})"

    @admin.display(description="Tools offered")
    def tools_table(self, obj: UpstreamServer) -> SafeString | str:
        if not obj.discovered_tools:
            return "Refresh to see the upstream's tools."
        published = {tool.backend_config.get("tool"): tool for tool in published_tools(obj)}
        waiting = tools_with_pending([tool.pk for tool in published.values()])
        rows = []
        for raw in obj.discovered_tools:
            tool = published.get(raw["name"])
            if tool is None:
                state = "not published"
            elif tool.backend_config.get("withdrawn"):
                state = f"withdrawn upstream (was published as {tool.name})"
            else:
                state = f"published as {tool.name}" + ("" if tool.enabled else " (disabled)")
                if tool.pk in waiting:
                    state += "; a changed definition waits for approval (Pending definitions)"
            rows.append((raw["name"], (raw.get("description") or "")[:120], state))
        body = format_html_join("", "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>", rows)
        return format_html("<table><tr><th>Upstream tool</th><th>Description</th><th>Here</th></tr>{}</table>", body)

    # --- refresh ------------------------------------------------------------------------------

    def _refresh(self, request: HttpRequest, upstream: UpstreamServer) -> None:
        try:
            report = upstream_refresh(upstream_id=upstream.pk)
        except UpstreamRefreshError as exc:
            self.message_user(request, f"{upstream.name}: {exc}", messages.ERROR)
            return
        self.message_user(request, f"{upstream.name} refreshed: {report.summary()}.", messages.SUCCESS)
        for note in report.notes:
            self.message_user(request, f"{upstream.name}: {note}", messages.WARNING)

    @admin.action(description="Refresh tools from the selected upstream servers")
    def refresh_selected(self, request: HttpRequest, queryset: QuerySet[UpstreamServer]) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied
        for upstream in queryset:
            self._refresh(request, upstream)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "<path:object_id>/refresh/",
                self.admin_site.admin_view(require_POST(self.refresh_view)),
                name=f"{prefix}_refresh",
            ),
            path(
                "<path:object_id>/publish/",
                self.admin_site.admin_view(self.publish_view),
                name=f"{prefix}_publish",
            ),
            *super().get_urls(),
        ]

    def _changeable(self, request: HttpRequest, object_id: str) -> UpstreamServer:
        upstream: UpstreamServer | None = self.get_object(request, unquote(object_id))
        if upstream is None:
            raise Http404("No upstream server with this id.")
        if not self.has_change_permission(request, upstream):
            raise PermissionDenied
        return upstream

    def refresh_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        upstream = self._changeable(request, object_id)
        self._refresh(request, upstream)
        return HttpResponseRedirect(reverse("admin:tools_app_upstreamserver_change", args=[upstream.pk]))

    def publish_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        upstream = self._changeable(request, object_id)
        published = {tool.backend_config.get("tool"): tool for tool in published_tools(upstream)}
        offered = [raw["name"] for raw in upstream.discovered_tools or []]
        errors: list[str] = []
        if request.method == "POST":
            choices: dict[str, str | None] = {}
            for index, name in enumerate(offered):
                chosen = request.POST.get(f"publish-{index}") == "on"
                choices[name] = request.POST.get(f"name-{index}", "").strip() if chosen else None
            try:
                report = upstream_publish(upstream=upstream, choices=choices)
            except ValidationError as exc:
                errors = exc.messages
            else:
                self.message_user(request, f"{upstream.name}: {report.summary()}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:tools_app_upstreamserver_change", args=[upstream.pk]))
        rows = []
        posted = request.method == "POST"
        for index, name in enumerate(offered):
            tool = published.get(name)
            proposed = request.POST.get(f"name-{index}") if posted else None
            ticked = request.POST.get(f"publish-{index}") == "on" if posted else tool is not None
            rows.append(
                {
                    "index": index,
                    "upstream_name": name,
                    "published": ticked,
                    "local_name": proposed or (tool.name if tool else local_name(upstream.tool_prefix, name)),
                }
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": upstream,
            "title": f"Publish tools of {upstream.name}",
            "rows": rows,
            "errors": errors,
        }
        return TemplateResponse(request, "admin/tools_app/upstreamserver/publish.html", context)
