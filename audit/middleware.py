"""Attribute admin and API changes to the signed-in user (or the API token's user)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from mcp_platform.actors import Actor, acting_as


class AuditActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            source = "api"
        elif request.path.startswith(("/oauth/", "/.well-known/")):
            source = "oauth"  # the embedded authorization server: consents, registrations, revocations
        else:
            source = "admin"
        with acting_as(Actor(source=source, request=request)):
            return self.get_response(request)
