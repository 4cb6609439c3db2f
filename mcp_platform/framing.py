"""No page of Toolbay may be framed by another site (clickjacking of the consent page, the
admin, the console, the login).

``X-Frame-Options: DENY`` (Django's middleware) is the old header; CSP ``frame-ancestors``
is the one browsers obey first and the only one for nested frames. Django 5.2 has no CSP
support of its own, so this adds ``frame-ancestors 'none'`` to every HTML response that
does not set its own policy.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

FRAME_ANCESTORS = "frame-ancestors 'none'"


class FrameAncestorsMiddleware(MiddlewareMixin):
    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if "Content-Security-Policy" not in response and response.get("Content-Type", "").startswith("text/html"):
            response["Content-Security-Policy"] = FRAME_ANCESTORS
        return response
