"""Admin screens: lockouts (read-only; delete one to lift it) and SSO identities (read-only)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from staff_auth.models import SignInLockout, StaffIdentity


@admin.register(SignInLockout)
class SignInLockoutAdmin(admin.ModelAdmin[SignInLockout]):
    list_display = ("kind", "key", "failures", "locked_until", "created_at")
    list_filter = ("kind",)
    search_fields = ("key",)
    readonly_fields = ("kind", "key", "failures", "locked_until", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: SignInLockout | None = None) -> bool:
        return False


@admin.register(StaffIdentity)
class StaffIdentityAdmin(admin.ModelAdmin[StaffIdentity]):
    list_display = ("user", "subject", "issuer", "groups", "last_sign_in_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "subject")
    readonly_fields = (
        "user", "issuer", "subject", "groups", "granted_staff", "granted_superuser", "created_at", "last_sign_in_at",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
