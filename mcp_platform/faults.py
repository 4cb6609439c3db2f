"""Faults of the services a request needs: which exceptions mean "Redis or the database did
not answer", and the answer Django gives for them (503 with ``Retry-After``).

A request cut short by a missing dependency is not a bug: the client should wait and try
again, and a load balancer should not count it against the process. The MCP transport asks
``is_unavailable`` the same question (``mcp_platform.endpoint`` hands it over), so both
sides of the server answer an outage the same way.
"""

from __future__ import annotations

import sys

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.views.defaults import server_error as django_server_error

UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, OperationalError, InterfaceError)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says Redis or the database could not be reached,
    timed out, or had no free connection within the pool's wait."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; a cycle must not loop forever
        if seen is None:
            return False
        if isinstance(seen, UNAVAILABLE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_after() -> bytes:
    return str(settings.TOOLBAY_RETRY_AFTER_SECONDS).encode()


def unavailable_response() -> JsonResponse:
    response = JsonResponse(
        {"detail": "Service unavailable: the database or Redis did not answer; retry later."}, status=503
    )
    response["Retry-After"] = retry_after().decode()
    return response


class UnavailableMiddleware(MiddlewareMixin):
    """A view cut short by a missing dependency answers 503 (with DEBUG too, where Django
    would show its debug page instead of ``handler500``)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return unavailable_response() if is_unavailable(exception) else None


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``, for what fails outside a view (a middleware's query): an outage is a
    503 with ``Retry-After``; another fault under ``/api/`` is JSON (what its clients parse),
    elsewhere Django's own page."""
    exc = sys.exc_info()[1]
    if exc is not None and is_unavailable(exc):
        return unavailable_response()
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Internal server error."}, status=500)
    return django_server_error(request)
