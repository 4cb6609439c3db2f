"""Admin screens for tenants, memberships and API keys, and the tenant scoping every
Toolbay admin screen shares.

Who sees what:

- Superusers are platform admins and see and edit everything.
- A staff user who is an owner or admin (``Membership.role``) of some tenants is a
  tenant admin: every screen shows only objects of those tenants, every tenant choice is
  limited to them, and their own tenants are read-only to them. Django permission rows
  play no part, so a permission granted by mistake cannot widen anyone's view.
- Anyone else sees nothing.

Who is who comes from the request's ``TenantScope`` (``tenants.scope``), as in the REST API
and the console; the admin's reading of it is ``administered_tenant_ids``. An object
outside the signed-in user's scope answers 404, exactly like a missing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from tenants.forms import ApiKeyAddForm, ApiKeyChangeForm, MembershipForm
from tenants.models import ApiKey, Membership, Tenant
from tenants.scope import Role, TenantScope, tenant_scope
from tenants.services import api_key_create, api_key_revoke

if TYPE_CHECKING:
    from django.db.models.fields.related import RelatedField

_RAW_KEY_ATTR = "_toolbay_raw_key"


def administered_tenant_ids(scope: TenantScope) -> frozenset[int]:
    """The tenants a tenant admin manages here: those where a staff user is an owner or
    admin, whether the tenant is active or not (not meaningful for platform admins)."""
    if not scope.staff:
        return frozenset()
    return scope.tenant_ids(Role.ADMIN, include_inactive=True)


def administers(scope: TenantScope, tenant_id: int | None) -> bool:
    """Whether the user manages this tenant's objects here (None: platform objects)."""
    return scope.platform or (tenant_id is not None and tenant_id in administered_tenant_ids(scope))


def is_tenant_admin(scope: TenantScope) -> bool:
    return not scope.platform and bool(administered_tenant_ids(scope))


class TenantScopedAdmin(admin.ModelAdmin[Any]):
    """A ModelAdmin whose objects each belong to one tenant (see the module docstring).

    ``tenant_lookup`` is the queryset path to the owning tenant, ``tenant_id_attr`` the
    attribute holding its id on an object.
    """

    tenant_lookup = "tenant"
    tenant_id_attr = "tenant_id"

    # --- what is visible --------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        scope = tenant_scope(request)
        if scope.platform:
            return queryset
        return queryset.filter(**{f"{self.tenant_lookup}__in": administered_tenant_ids(scope)})

    def object_tenant_id(self, obj: Model) -> int | None:
        tenant_id: int | None = getattr(obj, self.tenant_id_attr)
        return tenant_id

    def _object_or_404(self, request: HttpRequest, object_id: str) -> None:
        # Django's default for an object outside get_queryset() is a redirect with a
        # "doesn't exist" message; a plain 404 is what "missing and forbidden look the
        # same" means, and it keeps other tenants' ids from being probed.
        if self.get_object(request, unquote(object_id)) is None:
            raise Http404(f"No {self.opts.verbose_name} with this id.")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)

    # --- permissions: membership based for tenant admins ------------------------------

    def _tenant_admin_may(self, request: HttpRequest, obj: Model | None) -> bool:
        scope = tenant_scope(request)
        return is_tenant_admin(scope) and (obj is None or administers(scope, self.object_tenant_id(obj)))

    def has_module_permission(self, request: HttpRequest) -> bool:
        if tenant_scope(request).platform:
            return super().has_module_permission(request)
        return is_tenant_admin(tenant_scope(request))

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if tenant_scope(request).platform:
            return super().has_view_permission(request, obj)
        return self._tenant_admin_may(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        if tenant_scope(request).platform:
            return super().has_add_permission(request)
        return is_tenant_admin(tenant_scope(request))

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if tenant_scope(request).platform:
            return super().has_change_permission(request, obj)
        return self._tenant_admin_may(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if tenant_scope(request).platform:
            return super().has_delete_permission(request, obj)
        return self._tenant_admin_may(request, obj)

    # --- choices and writes -----------------------------------------------------------

    def get_field_queryset(
        self, db: str | None, db_field: RelatedField[Any, Any], request: HttpRequest
    ) -> QuerySet[Any] | None:
        """Relation choices are what the user can see in the related model's own admin."""
        if tenant_scope(request).platform:
            return super().get_field_queryset(db, db_field, request)
        related_model = db_field.related_model
        related_admin = self.admin_site._registry.get(related_model)
        if isinstance(related_admin, TenantScopedAdmin):
            return related_admin.get_queryset(request)
        return related_model._default_manager.none()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        scope = tenant_scope(request)
        tenant_ids = administered_tenant_ids(scope)
        if is_tenant_admin(scope) and len(tenant_ids) == 1:
            initial.setdefault("tenant", str(next(iter(tenant_ids))))
        return initial

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm[Any], change: bool) -> None:
        # The form's choices already keep tenant admins inside their tenants; this is the
        # backstop should a form ever offer more.
        if not administers(tenant_scope(request), self.object_tenant_id(obj)):
            raise PermissionDenied
        super().save_model(request, obj, form, change)


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_lookup = "pk"
    tenant_id_attr = "pk"

    list_display = (
        "slug",
        "name",
        "is_active",
        "allow_anonymous",
        "calls_per_minute",
        "max_concurrent_calls",
        "created_at",
    )
    list_filter = ("is_active", "allow_anonymous")
    search_fields = ("slug", "name")
    readonly_fields = ("endpoint", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("slug", "name", "endpoint", "is_active", "allow_anonymous", "api_keys_enabled")}),
        ("Limits", {"fields": ("calls_per_minute", "max_concurrent_calls")}),
        ("Tools", {"fields": ("tool_listing",)}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="MCP endpoint")
    def endpoint(self, obj: Tenant) -> str:
        return f"/mcp/{obj.slug}" if obj.slug else "-"

    # Tenants themselves, their limits and their anonymous access are platform decisions:
    # tenant admins may look at their own tenants, not change them.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return tenant_scope(request).platform and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return tenant_scope(request).platform and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return tenant_scope(request).platform and super().has_delete_permission(request, obj)


def _owned_tenant_ids(scope: TenantScope) -> frozenset[int]:
    """Tenants where the user is an owner (not merely an admin), active or not."""
    return scope.tenant_ids(Role.OWNER, include_inactive=True)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", ("tenant", admin.RelatedOnlyFieldListFilter))
    search_fields = ("user__username", "user__email", "tenant__slug", "tenant__name")
    list_select_related = ("user", "tenant")
    autocomplete_fields = ("tenant",)

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> tuple[str, ...]:
        # A membership is a (user, tenant) pair; to move it, delete it and add another.
        return ("user", "tenant", "created_at") if obj is not None else ()

    def get_form(
        self, request: HttpRequest, obj: Membership | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[Membership]]:
        form = super().get_form(request, obj, change=change, **kwargs)
        assert issubclass(form, MembershipForm)  # the admin's `form`, subclassed by Django per request
        scope = tenant_scope(request)
        form.owner_tenant_ids = None if scope.platform else _owned_tenant_ids(scope)
        return form

    def _touches_owner(self, request: HttpRequest, obj: Model | None) -> bool:
        """Whether obj is an owner's membership the (non-owner) user may not touch."""
        scope = tenant_scope(request)
        if obj is None or scope.platform:
            return False
        assert isinstance(obj, Membership)
        return obj.role == Membership.Role.OWNER and obj.tenant_id not in _owned_tenant_ids(scope)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_change_permission(request, obj) and not self._touches_owner(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_delete_permission(request, obj) and not self._touches_owner(request, obj)


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys are made by ``api_key_create``; the raw key is shown on the page after saving, once."""

    list_display = ("name", "tenant", "prefix", "scope_list", "status", "expires_at", "last_used_at", "created_at")
    list_filter = (("tenant", admin.RelatedOnlyFieldListFilter), ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "prefix", "tenant__slug", "tenant__name")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    actions = ("revoke_keys",)
    created_template = "admin/tenants/apikey/created.html"

    add_fieldsets = ((None, {"fields": ("tenant", "name", "scopes", "expires_at", "tool_listing")}),)
    change_fieldsets = (
        (None, {"fields": ("tenant", "name", "scopes", "expires_at", "tool_listing")}),
        ("Key", {"fields": ("prefix", "key_hash", "status", "revoked_at", "last_used_at", "created_at", "created_by")}),
    )
    change_readonly_fields = (
        "tenant",
        "prefix",
        "key_hash",
        "status",
        "revoked_at",
        "last_used_at",
        "created_at",
        "created_by",
    )

    def get_fieldsets(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        return self.add_fieldsets if obj is None else self.change_fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        return () if obj is None else self.change_readonly_fields

    def get_form(
        self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[ApiKey]]:
        kwargs["form"] = ApiKeyAddForm if obj is None else ApiKeyChangeForm
        return super().get_form(request, obj, change=change, **kwargs)

    @admin.display(description="Scopes")
    def scope_list(self, obj: ApiKey) -> str:
        return " ".join(obj.scopes or []) or "-"

    @admin.display(description="Status")
    def status(self, obj: ApiKey) -> str:
        if obj.revoked_at is not None:
            return "revoked"
        if obj.expires_at is not None and obj.expires_at <= timezone.now():
            return "expired"
        return "active"

    def save_model(self, request: HttpRequest, obj: ApiKey, form: ModelForm[ApiKey], change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        if not administers(tenant_scope(request), obj.tenant_id):
            raise PermissionDenied
        key, raw = api_key_create(
            tenant=obj.tenant,
            name=obj.name,
            scopes=obj.scopes,
            expires_at=obj.expires_at,
            created_by=cast(User, request.user),
            tool_listing=obj.tool_listing,
        )
        # The admin carries on (history entry, response) with the form's instance.
        for field in ApiKey._meta.concrete_fields:
            setattr(obj, field.attname, getattr(key, field.attname))
        obj._state.adding = False
        obj._state.db = key._state.db
        setattr(request, _RAW_KEY_ATTR, raw)

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        raw = getattr(request, _RAW_KEY_ATTR, None)
        if raw is None:  # pragma: no cover - save_model always sets it
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"API key {obj.name!r} created",
            "key": obj,
            "raw_key": raw,
            "is_popup": admin.options.IS_POPUP_VAR in request.POST,
        }
        # Rendered in the POST response rather than after a redirect, so the raw key is
        # never stored anywhere (not in the session, not in a message cookie).
        return TemplateResponse(request, self.created_template, context)

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(key=key)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)
