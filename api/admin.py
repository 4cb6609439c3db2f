"""Personal access tokens in the admin: platform admins can see and revoke them (never the raw token)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from api.models import PersonalAccessToken
from api.services import access_token_revoke


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(admin.ModelAdmin[PersonalAccessToken]):
    list_display = ("name", "user", "prefix", "expires_at", "revoked_at", "last_used_at", "created_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("user", "name", "prefix", "expires_at", "revoked_at", "last_used_at", "created_at")
    exclude = ("token_hash",)
    actions = ("revoke_tokens",)

    # Tokens are made by their users (API or `manage.py create_access_token`), never here.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: PersonalAccessToken | None = None) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: PersonalAccessToken | None = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: PersonalAccessToken | None = None) -> bool:
        return self.has_module_permission(request)

    @admin.action(description="Revoke selected access tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[PersonalAccessToken]) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True):
            access_token_revoke(token=token)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} access token(s).", messages.SUCCESS)
