from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Handlers register themselves on import; the admin lists the registered names.
        from tools_app import packs, signals  # noqa: F401
