"""The password backend of the admin, the console and the OAuth sign-in page.

Django's ``ModelBackend`` behind two gates: a throttled address or account, and password
sign-in turned off (``TOOLBAY_SSO_PASSWORD_LOGIN=0``) for everyone but the break-glass
account. Each gate raises ``ValidationError``: ``authenticate()`` lets it through to the
``AuthenticationForm`` that called it, which shows its message (instead of "wrong
password") — the same on every sign-in page, none of which needs to know about it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from staff_auth import throttle


def client_address(request: HttpRequest | None) -> str:
    # REMOTE_ADDR is what the ASGI server saw, or what it took from a proxy it trusts.
    return str(request.META.get("REMOTE_ADDR", "")) if request is not None else ""


def password_login_allowed(username: str) -> bool:
    if settings.TOOLBAY_SSO_PASSWORD_LOGIN:
        return True
    break_glass: str = settings.TOOLBAY_SSO_BREAK_GLASS_USERNAME
    return bool(break_glass) and username == break_glass


class ThrottledPasswordBackend(ModelBackend):
    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        if username is None or password is None:
            return None
        address = client_address(request)
        refused = throttle.refusal(username=username, address=address)
        if refused is not None:
            raise ValidationError(refused, code="throttled")
        if not password_login_allowed(username):
            raise ValidationError(
                "Password sign-in is turned off: sign in with your company account (single sign-on).",
                code="password_login_off",
            )
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            throttle.record_failure(username=username, address=address)
        return user
