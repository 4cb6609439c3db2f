"""Admin screens of OpenAPI imports: the sources (read-only: an import changes them) and the
import page (a file, pasted text or a URL; a preview first, then the import), scoped like
every tenant object by ``TenantScopedAdmin``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from audit.services import audit_change
from tenants.admin import TenantScopedAdmin, administered_tenant_ids, administers
from tenants.models import Tenant
from tenants.scope import tenant_scope
from tools_app.imports.openapi.models import OpenApiOperation, OpenApiSource
from tools_app.imports.openapi.operations import Selection
from tools_app.imports.openapi.services import (
    DocumentProblem,
    ImportOptions,
    ImportPlan,
    OptionProblem,
    SecurityOptions,
    SourceText,
    openapi_import,
    openapi_preview,
    read_source,
)


def _words(value: str) -> list[str]:
    return [word for word in value.replace(",", " ").split() if word]


class OpenApiImportForm(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(), required=False, help_text="Empty: platform tools (platform admins only)."
    )
    file = forms.FileField(required=False, help_text="An OpenAPI 3.0/3.1 or Swagger 2.0 document (JSON or YAML).")
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "cols": 100}), required=False, label="Or paste it")
    url = forms.URLField(required=False, label="Or fetch it from", assume_scheme="https")
    # Not "prefix": forms use that attribute for their field names.
    name_prefix = forms.CharField(required=False, max_length=60, help_text="Prepended to every tool name.")
    base_url = forms.URLField(required=False, assume_scheme="https", help_text="Default: the document's server.")
    include = forms.CharField(required=False, help_text="Only these operationIds (space-separated).")
    openapi_tags = forms.CharField(required=False, label="OpenAPI tags", help_text="Only operations with these tags.")
    connection_provider = forms.CharField(
        required=False,
        max_length=64,
        help_text="For OAuth2 (authorization code) and OpenID Connect: the connection provider whose per-user "
        "tokens the tools use. Default: the registered one whose endpoints match the document's.",
    )
    client_id = forms.CharField(
        required=False,
        max_length=255,
        label="OAuth client ID",
        help_text="For OAuth2 client credentials (the client secret goes into the vault as <source>-<scheme>).",
    )
    grant = forms.BooleanField(required=False, help_text="Allow the tenant to use the tools.")
    approve = forms.BooleanField(
        required=False,
        help_text="Publish changed definitions of tools an earlier import made (else they wait for approval).",
    )

    def __init__(self, *args: Any, tenants: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        given = [name for name in ("file", "text", "url") if data.get(name)]
        if len(given) != 1:
            raise forms.ValidationError("Give the document one way: a file, pasted text or a URL.")
        return data


@admin.register(OpenApiSource)
class OpenApiSourceAdmin(TenantScopedAdmin):
    list_display = ("name", "tenant", "title", "imported_at", "short_hash")
    list_select_related = ("tenant",)
    # An import changes a source; the admin decides only whether its changes need approval.
    readonly_fields = ("tenant", "name", "title", "location", "sha256", "options", "imported_at", "created_at")
    fields = (*readonly_fields, "auto_approve")

    @admin.display(description="SHA-256")
    def short_hash(self, obj: OpenApiSource) -> str:
        return obj.sha256[:12]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        # Sources are not in the change audit as a whole (each import would copy the document
        # into it); whether a source is trusted is, like any security setting.
        if change and "auto_approve" in form.changed_data:
            audit_change(obj, "updated", {"auto_approve": not obj.auto_approve}, {"auto_approve": obj.auto_approve})

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None) -> Any:
        """The import page instead of a blank form."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        scope = tenant_scope(request)
        tenants = (
            Tenant.objects.all() if scope.platform else Tenant.objects.filter(pk__in=administered_tenant_ids(scope))
        )
        plan: ImportPlan | None = None
        form = OpenApiImportForm(request.POST or None, request.FILES or None, tenants=tenants)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            tenant = data["tenant"]
            if not administers(scope, tenant.pk if tenant is not None else None):
                raise PermissionDenied
            options = ImportOptions(
                prefix=data["name_prefix"],
                base_url=data["base_url"],
                selection=Selection(operation_ids=_words(data["include"]), tags=_words(data["openapi_tags"])),
                approve=data["approve"],
                security=SecurityOptions(connection_provider=data["connection_provider"], client_id=data["client_id"]),
            )
            try:
                if data["file"]:
                    source = SourceText(data["file"].read(), data["file"].name)
                else:
                    source = read_source(text=data["text"], url=data["url"])
                if "_import" in request.POST:
                    plan = openapi_import(source=source, tenant=tenant, options=options, grant=data["grant"])
                    changed = plan.count("create") + plan.count("update")
                    parked = plan.count("park")
                    waiting = f"; {parked} changed definitions wait for approval" if parked else ""
                    self.message_user(request, f"{plan.source_name}: {changed} tools created or updated{waiting}.")
                    return HttpResponseRedirect(reverse("admin:tools_app_tool_changelist"))
                plan = openapi_preview(source=source, tenant=tenant, options=options)
            except DocumentProblem as exc:
                form.add_error(None, str(exc))
            except OptionProblem as exc:
                form.add_error(exc.option, str(exc))
            if plan is not None and data["file"]:
                messages.info(request, "Choose the file again to import it (browsers do not keep it).")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Import an OpenAPI description",
            "form": form,
            "plan": plan,
        }
        return TemplateResponse(request, "admin/tools_app/openapisource/import.html", context)


@admin.register(OpenApiOperation)
class OpenApiOperationAdmin(TenantScopedAdmin):
    tenant_lookup = "source__tenant"
    list_display = ("operation", "tool", "source")
    list_select_related = ("tool", "source")
    raw_id_fields = ("tool", "source")
    readonly_fields = ("source", "tool", "operation", "operation_id", "definition_sha256", "source_definition")

    def object_tenant_id(self, obj: Any) -> int | None:
        return obj.source.tenant_id  # type: ignore[no-any-return]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
