"""The tenants app: tenants, memberships, API keys and the hot-path credential check."""

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"
