"""The audit app: invocation log, change audit, their retention and the call metrics."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit import signals  # noqa: F401  (change audit for the tracked models)
        from mcp_platform.metrics import register_call_collector
        from tenants.selectors import tenant_slugs

        register_call_collector(tenant_slugs)
