"""The OAuth app: installs its token check into the hot path's tenant directory."""

from __future__ import annotations

from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "oauth"
    label = "oauth"
    verbose_name = "OAuth"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from oauth import signals  # noqa: F401  (connects the receivers)
        from oauth.connections.assertions import asserter
        from oauth.connections.broker import broker
        from oauth.resource.verifier import token_verifier
        from tenants.auth import tenant_directory
        from tools_app.backends.connections import use_asserter, use_broker

        tenant_directory.use_token_verifier(token_verifier)
        use_broker(broker)
        use_asserter(asserter)
