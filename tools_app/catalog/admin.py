"""Admin screens for tools, resources, resource templates, prompts and access rules.

Scoping follows ``tenants.admin.TenantScopedAdmin``: platform admins (superusers) see
everything; a tenant admin sees and edits only their tenants' private tools and the
access rules their tenants own. Platform tools are hidden from tenant admins (a tenant
admin denies a platform tool for their tenant with a rule on its name, e.g. the pattern
``demo.echo``).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms import ModelChoiceField, ModelForm
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tenants.admin import TenantScopedAdmin, administered_tenant_ids, administers
from tenants.scope import tenant_scope
from tools_app.catalog.confirmation import confirmation_summary
from tools_app.catalog.curation import apply_curation
from tools_app.catalog.forms import (
    AccessRuleForm,
    PromptForm,
    ResourceForm,
    ResourceTemplateForm,
    ToolCurationForm,
    ToolCurationFormSet,
    ToolForm,
)
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool, ToolCuration
from tools_app.catalog.selectors import platform_rules_targeting
from tools_app.catalog.services import (
    CURATION_FIELDS,
    catalog_entry_delete,
    catalog_entry_save,
    tool_curate,
    tool_curation_delete,
)
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec, ToolSpec

PREVIEW_STYLE = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; "
    "margin: 0; padding: 8px; max-width: 60em; overflow-x: auto;"
)


class _PlatformOrTenantFilter(admin.SimpleListFilter):
    """Rows of the platform (``field`` empty) or of a tenant; ``sides`` are the two (value, label)."""

    field = "tenant"
    sides: tuple[tuple[str, str], tuple[str, str]]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(self.sides)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        (platform, _), (tenant, _) = self.sides
        if self.value() in (platform, tenant):
            return queryset.filter(**{f"{self.field}__isnull": self.value() == platform})
        return queryset


class CatalogFilter(_PlatformOrTenantFilter):
    title = "catalog"
    parameter_name = "catalog"
    sides = (("platform", "Platform catalog"), ("private", "Private to a tenant"))


class ManagedByFilter(_PlatformOrTenantFilter):
    title = "managed by"
    parameter_name = "managed_by"
    field = "owner"
    sides = (("platform", "Platform"), ("tenant", "A tenant"))


class _CatalogScopedAdmin(TenantScopedAdmin):
    """What the rule and entry screens share: a tenant admin must pick a tenant, and the form
    knows whether a tenant admin fills it in (``by_tenant_admin``)."""

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> ModelChoiceField[Any] | None:
        # Tenant admins never make platform-wide objects: the tenant is not optional for them.
        if db_field.name == "tenant" and not tenant_scope(request).platform:
            kwargs["required"] = True
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[Any]]:
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = tenant_scope(request)
        form.by_tenant_admin = not scope.platform  # type: ignore[attr-defined]
        # A tenant admin's tool form offers only the handlers their tenants' catalogs may bind.
        form.handler_tenant_ids = None if scope.platform else administered_tenant_ids(scope)  # type: ignore[attr-defined]
        return form


@admin.register(AccessRule)
class AccessRuleAdmin(_CatalogScopedAdmin):
    tenant_lookup = "owner"
    tenant_id_attr = "owner_id"

    form = AccessRuleForm
    list_display = (
        "__str__", "effect", "kind", "target", "applies_to", "managed_by", "narrowed_to", "enabled", "note",
        "updated_at",
    )  # fmt: skip
    list_display_links = ("__str__",)
    list_filter = ("enabled", "effect", "kind", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("tool__name", "tool_pattern", "note", "tenant__slug")
    list_select_related = ("tool", "tenant", "owner")
    autocomplete_fields = ("tool", "tenant", "owner", "api_keys")
    readonly_fields = ("created_at", "updated_at", "created_by")
    fieldsets = (
        (
            None,
            {
                "fields": ("effect", "tool", "kind", "tool_pattern"),
                "description": "Target one tool, or by pattern what 'kind' names (tools, resources with "
                "resource templates, prompts, or all): a glob on names ('demo.*', '*', or an exact name; "
                "resources also match by URI) or tag:<label>. Deny wins over allow; with no matching allow "
                "it is hidden.",
            },
        ),
        ("Who it applies to", {"fields": ("tenant", "owner", "api_keys", "oauth_subjects", "oauth_groups", "scopes")}),
        (
            "Confirmation",
            {
                "fields": ("confirmation",),
                "description": "Make the confirmation of what this rule grants stricter for its callers (the "
                "strictest policy of the tool and every rule that applies wins; empty: no change).",
            },
        ),
        ("Search mode", {"fields": ("always_visible",)}),
        (None, {"fields": ("enabled", "note")}),
        ("History", {"fields": ("created_at", "updated_at", "created_by")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[AccessRule]:
        return super().get_queryset(request).prefetch_related("api_keys")

    def get_fieldsets(self, request: HttpRequest, obj: AccessRule | None = None) -> Any:
        if tenant_scope(request).platform:
            return self.fieldsets
        # A tenant admin's rules are owned by the tenant they apply to (set by the form).
        return tuple(
            (name, {**options, "fields": tuple(f for f in options["fields"] if f != "owner")})
            for name, options in self.fieldsets
        )

    def get_list_filter(self, request: HttpRequest) -> Any:
        if tenant_scope(request).platform:
            return (*self.list_filter, ManagedByFilter)
        return self.list_filter

    def save_model(self, request: HttpRequest, obj: AccessRule, form: ModelForm[AccessRule], change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    @admin.display(description="Target")
    def target(self, obj: AccessRule) -> str:
        return obj.tool.name if obj.tool is not None else obj.tool_pattern

    @admin.display(description="Tenant", ordering="tenant__slug")
    def applies_to(self, obj: AccessRule) -> str:
        return obj.tenant.slug if obj.tenant is not None else "all tenants"

    @admin.display(description="Managed by", ordering="owner__slug")
    def managed_by(self, obj: AccessRule) -> str:
        return obj.owner.slug if obj.owner is not None else "platform"

    @admin.display(description="Narrowed to")
    def narrowed_to(self, obj: AccessRule) -> str:
        parts = [f"key {key.name}" for key in obj.api_keys.all()]
        parts += [f"subject {subject}" for subject in obj.oauth_subjects or []]
        parts += [f"group {group}" for group in obj.oauth_groups or []]
        parts += [f"scope {scope}" for scope in obj.scopes or []]
        return ", ".join(parts) or "-"


class CatalogEntryAdmin(_CatalogScopedAdmin):
    """What the tool, resource, template and prompt screens share: catalog scoping, the preview of
    what clients see, and writes through the ``catalog_entry_*`` services."""

    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    list_filter: ClassVar[tuple[Any, ...]] = ("enabled", "backend_kind", ("tenant", admin.RelatedOnlyFieldListFilter))
    history: Any = ("History", {"fields": ("version", "created_at", "updated_at")})
    spec: Any = None

    def get_list_filter(self, request: HttpRequest) -> Any:
        if tenant_scope(request).platform:
            return (CatalogFilter, *self.list_filter)
        return self.list_filter

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        what = self.opts.verbose_name
        preview = {"fields": ("mcp_preview",), "description": f"The saved {what} exactly as clients see it."}
        return (*fieldsets, ("MCP preview", preview))

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm[Any], change: bool) -> None:
        # The backstop of TenantScopedAdmin.save_model, then the service instead of obj.save().
        if not administers(tenant_scope(request), obj.tenant_id):
            raise PermissionDenied
        catalog_entry_save(entry=obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        catalog_entry_delete(entry=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for entry in queryset:
            catalog_entry_delete(entry=entry)

    @admin.display(description="Catalog", ordering="tenant__slug")
    def catalog(self, obj: Any) -> str:
        return "platform" if obj.tenant_id is None else f"private: {obj.tenant}"

    def preview_notes(self, spec: Any) -> str:
        """What the preview says below the entry (a kind may say more)."""
        return ""

    @admin.display(description="What clients see")
    def mcp_preview(self, obj: Any) -> SafeString | str:
        # Read again: on a form with errors, obj carries the rejected edits.
        saved = type(obj).objects.filter(pk=obj.pk).first() if obj.pk is not None else None
        what = self.opts.verbose_name
        if saved is None:
            return f"Save the {what} to see its preview."
        spec = self.spec.from_model(saved)
        text = json.dumps(spec.wire, indent=2, ensure_ascii=False)
        disabled = "" if saved.enabled else f"Disabled: clients do not see this {what} until it is enabled."
        return format_html(
            '<pre class="mcp-preview" style="{}">{}</pre>{}{}', PREVIEW_STYLE, text, self.preview_notes(spec), disabled
        )


CURATION_PREFIX = "curation"  # the inline formset's prefix: the relation's name on Tool


class ToolCurationInline(admin.StackedInline[ToolCuration, Tool]):
    """What the model sees of the tool, edited on the tool's page; saved through ``tool_curate``."""

    model = ToolCuration
    form = ToolCurationForm
    formset = ToolCurationFormSet
    fields = ("name", "title", "description", "arguments")
    extra = 1
    max_num = 1
    verbose_name = "curation (what the model sees)"
    verbose_name_plural = "Curation: what the model sees instead of the source definition"

    def _tool_admin_may(self, request: HttpRequest, obj: Any, what: str) -> bool:
        # Curating a tool is changing it: whoever may change the tool may curate it.
        tool_admin = self.admin_site._registry[Tool]
        return bool(getattr(tool_admin, f"has_{what}_permission")(request, obj))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._tool_admin_may(request, obj, "view")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is not None and self._tool_admin_may(request, obj, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._tool_admin_may(request, obj, "change")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._tool_admin_may(request, obj, "change")


class ToolAdmin(CatalogEntryAdmin):
    """Registered by ``tools_app.admin``, which adds the test-call page (a runs feature)."""

    form = ToolForm
    spec = ToolSpec
    inlines = (ToolCurationInline,)
    list_display = ("name", "title", "catalog", "handler_name", "execution_mode", "enabled", "version", "updated_at")
    list_filter = (
        "enabled",
        "backend_kind",
        "execution_mode",
        "task_support",
        ("tenant", admin.RelatedOnlyFieldListFilter),
    )
    search_fields = ("name", "title", "description", "tenant__slug")
    readonly_fields = ("version", "created_at", "updated_at", "mcp_preview", "curation_side_by_side")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "title", "description", "enabled")}),
        ("Schemas", {"fields": ("input_schema", "output_schema")}),
        (
            "Annotations",
            {
                "fields": ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"),
                "description": "Hints for clients; leave unknown to omit them from tools/list.",
            },
        ),
        (
            "Confirmation",
            {
                "fields": ("confirmation",),
                "description": "Who must say yes before a call runs. Access rules can make it stricter for "
                "the callers they apply to, never looser.",
            },
        ),
        ("Presentation and matching", {"fields": ("icons", "tags", "always_visible")}),
        (
            "Backend",
            {
                "fields": (
                    "backend_kind",
                    "handler",
                    "backend_config",
                    "execution_mode",
                    "task_support",
                    "timeout_seconds",
                )
            },
        ),
        CatalogEntryAdmin.history,
    )

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ()  # a tool is curated once it exists
        if request.method == "POST" and f"{CURATION_PREFIX}-TOTAL_FORMS" not in request.POST:
            # A post without the curation's forms (a script that fills in the tool's fields)
            # leaves the curation as it is, rather than failing on the missing formset.
            return ()
        return self.inlines

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:
            return fieldsets
        side_by_side = {
            "fields": ("curation_side_by_side",),
            "description": "The fields above are the source definition (what an import or an upstream refresh "
            "writes). The curation below changes what the model sees, and survives re-imports.",
        }
        return (*fieldsets, ("Source definition | curated definition", side_by_side))

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not ToolCuration:
            super().save_formset(request, form, formset, change)
            return
        tool = form.instance
        for inline in formset.forms:
            if not hasattr(inline, "cleaned_data") or not inline.has_changed():
                continue
            if inline.cleaned_data.get("DELETE"):
                tool_curation_delete(tool=tool)
            else:
                tool_curate(tool=tool, fields={name: inline.cleaned_data.get(name) for name in CURATION_FIELDS})
        # What the change message reads of a saved formset.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    @admin.display(description="Source | published")
    def curation_side_by_side(self, obj: Tool) -> SafeString | str:
        saved = Tool.objects.filter(pk=obj.pk).select_related("curation").first() if obj.pk is not None else None
        if saved is None:
            return "Save the tool to curate it."
        source = json.dumps(ToolSpec.from_model(saved, curated=False).wire, indent=2, ensure_ascii=False)
        published = json.dumps(ToolSpec.from_model(saved).wire, indent=2, ensure_ascii=False)
        curation = ToolCuration.objects.filter(tool=saved).first()
        problems = apply_curation(saved.input_schema, curation.arguments, strict=False).problems if curation else ()
        notes = format_html_join(
            "", '<li class="curation-problem">{}</li>', ((f"Left out, the source changed: {p}",) for p in problems)
        )
        return format_html(
            '<table class="curation-side-by-side"><thead><tr><th>Source definition</th><th>Curated definition '
            "(what clients see)</th></tr></thead><tbody><tr>"
            '<td><pre class="curation-source" style="{}">{}</pre></td>'
            '<td><pre class="curation-published" style="{}">{}</pre></td>'
            "</tr></tbody></table>{}{}",
            PREVIEW_STYLE,
            source,
            PREVIEW_STYLE,
            published,
            format_html("<ul>{}</ul>", notes) if problems else "",
            "" if curation else "Not curated: clients see the source definition.",
        )

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, list[Any]]:
        """For tenant admins, platform rules on a tool protect it: the delete page and the bulk
        action refuse (see ``tool_check_platform_rules``)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        rules = [] if tenant_scope(request).platform else list(platform_rules_targeting(objs))
        if rules:
            # Django would only say the user may not delete "access rules"; say which, and why.
            perms_needed = perms_needed - {AccessRule._meta.verbose_name}
            protected = [*protected, *(f"Platform access rule #{rule.pk}: {rule}" for rule in rules)]
        return deleted, counts, perms_needed, protected

    @admin.display(description="Handler")
    def handler_name(self, obj: Tool) -> str:
        config = obj.backend_config if isinstance(obj.backend_config, dict) else {}
        return str(config.get("handler", "-"))

    def preview_notes(self, spec: ToolSpec) -> str:
        return format_html(
            '<p class="mcp-confirmation">{}</p>', confirmation_summary(spec.confirmation, spec.annotations)
        )


@admin.register(Resource)
class ResourceAdmin(CatalogEntryAdmin):
    form = ResourceForm
    spec = ResourceSpec
    list_display = ("uri", "name", "catalog", "mime_type", "backend_kind", "size", "enabled", "version", "updated_at")
    search_fields = ("uri", "name", "title", "description", "tenant__slug")
    readonly_fields = ("size", "last_modified", "version", "created_at", "updated_at", "mcp_preview")
    fieldsets = (
        (None, {"fields": ("tenant", "uri", "name", "title", "description", "mime_type", "enabled")}),
        (
            "Content",
            {
                "fields": ("backend_kind", "text", "upload", "clear_blob", "backend_config", "timeout_seconds"),
                "description": "Static content is stored here (text, or an uploaded file) and served as it is; "
                "saving new content notifies the clients subscribed to this URI. Other backends read it on "
                "demand.",
            },
        ),
        ("Annotations and presentation", {"fields": ("audience", "priority", "icons", "tags")}),
        ("History", {"fields": ("size", "last_modified", "version", "created_at", "updated_at")}),
    )


@admin.register(ResourceTemplate)
class ResourceTemplateAdmin(CatalogEntryAdmin):
    form = ResourceTemplateForm
    spec = TemplateSpec
    list_display = ("name", "uri_template", "catalog", "backend_kind", "enabled", "version", "updated_at")
    search_fields = ("name", "uri_template", "title", "description", "tenant__slug")
    readonly_fields = ("version", "created_at", "updated_at", "mcp_preview")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "uri_template", "title", "description", "mime_type", "enabled")}),
        (
            "Backend",
            {
                "fields": ("backend_kind", "backend_config", "timeout_seconds", "completions"),
                "description": "The template's variables (RFC 6570) are handed to the backend on every read.",
            },
        ),
        ("Annotations and presentation", {"fields": ("audience", "priority", "icons", "tags")}),
        CatalogEntryAdmin.history,
    )


@admin.register(Prompt)
class PromptAdmin(CatalogEntryAdmin):
    form = PromptForm
    spec = PromptSpec
    list_display = ("name", "title", "catalog", "backend_kind", "enabled", "version", "updated_at")
    search_fields = ("name", "title", "description", "tenant__slug")
    readonly_fields = ("version", "created_at", "updated_at", "mcp_preview")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "title", "description", "enabled")}),
        ("Arguments and messages", {"fields": ("arguments", "messages", "completions")}),
        (
            "Backend",
            {
                "fields": ("backend_kind", "backend_config", "timeout_seconds"),
                "description": "Keep 'Messages written here' to render the messages above; another backend "
                "produces the messages itself.",
            },
        ),
        ("Presentation", {"fields": ("icons", "tags")}),
        CatalogEntryAdmin.history,
    )
