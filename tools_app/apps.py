from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Handlers register themselves on import; the admin lists the registered names.
        import importlib

        from django.conf import settings

        from tools_app import packs, signals  # noqa: F401

        for module in settings.TOOLBAY_HANDLER_MODULES:
            importlib.import_module(module)
