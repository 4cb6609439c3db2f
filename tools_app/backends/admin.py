"""Admin screen of backend secrets: write-only values, scoped by ``TenantScopedAdmin`` (a
tenant admin sees and uses their tenants' secrets only; anything else answers 404)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.forms import ModelForm
from django.http import HttpRequest

from tenants.admin import TenantScopedAdmin
from tenants.scope import tenant_scope
from tools_app.backends.models import BackendSecret
from tools_app.backends.vault import secret_store_value

# --- secrets -------------------------------------------------------------------------------


class BackendSecretForm(forms.ModelForm[BackendSecret]):
    """The value is write-only: typed once, never rendered back (not even as dots)."""

    value = forms.CharField(
        label="Secret value",
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "size": 60}),
        help_text="Stored encrypted; nobody can read it back here. When changing a secret, leave this empty to "
        "keep the current value.",
    )

    class Meta:
        model = BackendSecret
        fields = ("tenant", "name", "description")

    def clean_value(self) -> str:
        value: str = self.cleaned_data.get("value", "")
        if not value and self.instance.pk is None:
            raise ValidationError("Enter the value to store.", code="required")
        return value

    def save(self, commit: bool = True) -> BackendSecret:
        secret: BackendSecret = super().save(commit=False)
        if self.cleaned_data.get("value"):
            secret_store_value(secret=secret, value=self.cleaned_data["value"])
        if commit:
            secret.save()
        return secret


@admin.register(BackendSecret)
class BackendSecretAdmin(TenantScopedAdmin):
    form = BackendSecretForm
    list_display = ("name", "scope", "description", "updated_at")
    list_filter = (("tenant", admin.RelatedOnlyFieldListFilter),)
    search_fields = ("name", "description", "tenant__slug")
    list_select_related = ("tenant",)
    autocomplete_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at", "created_by")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "description", "value")}),
        ("History", {"fields": ("created_at", "updated_at", "created_by")}),
    )

    @admin.display(description="Usable by", ordering="tenant__slug")
    def scope(self, obj: BackendSecret) -> str:
        return "platform tools" if obj.tenant_id is None else f"tools of {obj.tenant}"

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant" and not tenant_scope(request).platform:
            kwargs["required"] = True
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: BackendSecret, form: ModelForm[BackendSecret], change: bool
    ) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
