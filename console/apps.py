"""The operator console app (``/console/``, and the live sessions page in the admin)."""

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Operator console"
