"""The staff sign-in app: checks the SSO role map once, at start-up."""

from __future__ import annotations

from django.apps import AppConfig


class StaffAuthConfig(AppConfig):
    name = "staff_auth"
    label = "staff_auth"
    verbose_name = "Staff sign-in"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from staff_auth.roles import parse_role_map

        # A typo in the group → role map is a start-up error, not a sign-in that grants nothing.
        parse_role_map(settings.TOOLBAY_SSO_ROLE_MAP)
