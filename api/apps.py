"""The REST API app (``/api/``): personal access tokens and the v1 endpoints."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "REST API"

    def ready(self) -> None:
        # Registers the OpenAPI description of the token authentication with drf-spectacular.
        from api import schema  # noqa: F401
