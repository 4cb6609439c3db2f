"""The tools app: the catalog, the backends that run tools, and the call runtime."""

from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import importlib

        from django.conf import settings

        from mcp_platform import write_behind
        from mcp_platform.metrics import register_tool_labels

        # Handlers register themselves on import; the admin offers the registered names.
        from tools_app import packs  # noqa: F401

        # Backend kinds register with the catalog, which validates tools' backend settings.
        from tools_app.backends import registry  # noqa: F401
        from tools_app.backends import signals as backend_signals  # noqa: F401
        from tools_app.backends.python import checks as handler_checks  # noqa: F401  (registers its system check)
        from tools_app.catalog import checks as catalog_checks  # noqa: F401  (registers its system checks)
        from tools_app.catalog import signals as catalog_signals  # noqa: F401
        from tools_app.catalog.selectors import tool_metric_labels
        from tools_app.runs.writer import write_runs

        # /metrics names only known tools, and private ones by id (mcp_platform.metrics).
        register_tool_labels(tool_metric_labels)
        # Runs are accepted into Redis and written behind by the audit writer's process.
        write_behind.register("runs", write_runs)

        for module in settings.TOOLBAY_HANDLER_MODULES:
            importlib.import_module(module)
