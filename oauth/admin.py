"""Admin screens of OAuth: a tenant's settings and trusted issuers (platform admins and the
tenant's admins), its embedded server's clients and the consents its members gave (to look
at, and to revoke through the service)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from oauth.connections.services import connection_disconnect, public_base, redirect_uri
from oauth.models import Connection, ConnectionProvider, Grant, OAuthClient, TenantOAuth, TrustedIssuer
from oauth.sealing import seal
from oauth.server.authorization import grant_revoke
from tenants.admin import TenantScopedAdmin


@admin.register(TenantOAuth)
class TenantOAuthAdmin(TenantScopedAdmin):
    list_display = ("tenant", "enabled", "embedded_server", "registration_open", "list_scope", "call_scope")
    list_filter = ("enabled", "embedded_server")
    list_select_related = ("tenant",)
    search_fields = ("tenant__slug",)
    autocomplete_fields = ("tenant",)
    readonly_fields = ("updated_at",)
    fieldsets = (
        (None, {"fields": ("tenant", "enabled")}),
        (
            "Who issues tokens",
            {
                "fields": ("embedded_server", "registration_open"),
                "description": "The embedded server signs the tenant's members in; trusted issuers are listed "
                "below in their own screen. API keys keep working unless the tenant turns them off.",
            },
        ),
        ("Scopes", {"fields": ("list_scope", "call_scope")}),
        ("History", {"fields": ("updated_at",)}),
    )


def _https_by_default(field: models.Field[Any, Any], **kwargs: Any) -> forms.Field | None:
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


class TrustedIssuerForm(ModelForm[TrustedIssuer]):
    client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Introspection credentials: client secret. Stored encrypted; leave empty to keep the current one.",
    )

    class Meta:
        model = TrustedIssuer
        fields = "__all__"
        formfield_callback = staticmethod(_https_by_default)

    def save(self, commit: bool = True) -> TrustedIssuer:
        secret = self.cleaned_data.get("client_secret")
        if secret:
            self.instance.client_secret_sealed = seal(secret)
        return super().save(commit)


@admin.register(TrustedIssuer)
class TrustedIssuerAdmin(TenantScopedAdmin):
    form = TrustedIssuerForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ("issuer", "tenant", "enabled", "advertise", "validation", "audience")
    list_filter = ("enabled", "validation")
    list_select_related = ("tenant",)
    search_fields = ("issuer", "tenant__slug")
    autocomplete_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "issuer", "enabled", "advertise")}),
        (
            "Checking tokens",
            {
                "fields": (
                    "validation",
                    "discovery",
                    "jwks_uri",
                    "introspection_endpoint",
                    "client_id",
                    "client_secret",
                    "audience",
                )
            },
        ),
        ("Claims", {"fields": ("subject_claim", "groups_claim", "scope_claim")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )


@admin.register(OAuthClient)
class OAuthClientAdmin(TenantScopedAdmin):
    list_display = ("__str__", "tenant", "kind", "token_endpoint_auth_method", "created_at")
    list_filter = ("kind",)
    list_select_related = ("tenant",)
    search_fields = ("client_id", "client_name", "tenant__slug")
    readonly_fields = [field.name for field in OAuthClient._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # registered by clients, or with `manage.py oauth_client` / the REST API


@admin.register(Grant)
class GrantAdmin(TenantScopedAdmin):
    list_display = ("client", "user", "tenant", "scope", "created_at", "revoked_at")
    list_filter = ("revoked_at",)
    list_select_related = ("client", "user", "tenant")
    search_fields = ("user__username", "client__client_id", "client__client_name", "tenant__slug")
    readonly_fields = ("id", "tenant", "user", "client", "scope", "created_at", "updated_at", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke the selected authorizations")
    def revoke(self, request: HttpRequest, queryset: QuerySet[Grant]) -> None:
        count = 0
        for grant in queryset.filter(revoked_at__isnull=True):
            grant_revoke(grant=grant)
            count += 1
        self.message_user(request, f"{count} authorization(s) revoked.", messages.SUCCESS)


class ConnectionProviderForm(ModelForm[ConnectionProvider]):
    client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted; leave empty to keep the current one.",
    )

    class Meta:
        model = ConnectionProvider
        fields = "__all__"
        formfield_callback = staticmethod(_https_by_default)

    def save(self, commit: bool = True) -> ConnectionProvider:
        secret = self.cleaned_data.get("client_secret")
        if secret:
            self.instance.client_secret_sealed = seal(secret)
        return super().save(commit)


@admin.register(ConnectionProvider)
class ConnectionProviderAdmin(TenantScopedAdmin):
    form = ConnectionProviderForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ("name", "display_name", "tenant", "issuer", "client_id", "connection_count")
    list_select_related = ("tenant",)
    search_fields = ("name", "display_name", "issuer", "tenant__slug")
    autocomplete_fields = ("tenant",)
    readonly_fields = ("redirect_uri", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "display_name", "redirect_uri")}),
        (
            "Provider",
            {
                "fields": (
                    "issuer",
                    "authorization_endpoint",
                    "token_endpoint",
                    "revocation_endpoint",
                    "userinfo_endpoint",
                ),
                "description": "Give the issuer (endpoints are discovered), or the endpoints themselves.",
            },
        ),
        (
            "Client",
            {
                "fields": (
                    "client_id",
                    "client_secret",
                    "token_endpoint_auth_method",
                    "scopes",
                    "pkce",
                    "extra_authorize_params",
                )
            },
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="Redirect URI to register at the provider")
    def redirect_uri(self, obj: ConnectionProvider) -> str:
        return redirect_uri(public_base(), obj) if obj.pk else "(saved providers show it)"

    @admin.display(description="Connections")
    def connection_count(self, obj: ConnectionProvider) -> int:
        return obj.connections.count()


@admin.register(Connection)
class ConnectionAdmin(TenantScopedAdmin):
    """Who is connected to what; never the tokens."""

    list_display = ("label", "provider", "tenant", "account", "user", "expires_at", "last_used_at", "created_at")
    list_filter = ("provider",)
    list_select_related = ("provider", "tenant", "user")
    search_fields = ("label", "account", "user__username", "provider__name", "tenant__slug")
    fields = (
        "tenant",
        "provider",
        "label",
        "user",
        "account",
        "scopes",
        "expires_at",
        "created_at",
        "refreshed_at",
        "last_used_at",
    )
    readonly_fields = fields
    actions = ["disconnect"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the disconnect action revokes at the provider first

    @admin.action(description="Disconnect (revoke at the provider)")
    def disconnect(self, request: HttpRequest, queryset: QuerySet[Connection]) -> None:
        count = 0
        for connection in queryset.select_related("provider"):
            connection_disconnect(connection=connection)
            count += 1
        self.message_user(request, f"{count} connection(s) removed.", messages.SUCCESS)
