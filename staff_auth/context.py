"""Template context: whether the sign-in pages offer single sign-on."""

from __future__ import annotations

from django.http import HttpRequest

from staff_auth.oidc import configured


def sso(request: HttpRequest) -> dict[str, bool]:
    return {"staff_sso_enabled": configured()}
