"""Personal access tokens for scripts: ``Authorization: Bearer tbp_…``.

Browsers use the session (``SessionAuthentication``, with its CSRF check); scripts send a
token, which acts with its user's memberships. MCP API keys (``tbk_…``) are refused here:
they are credentials of a tenant's MCP clients, not of a person.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from api.selectors import access_token_for
from api.services import access_token_touch

INVALID_TOKEN = "Invalid, expired or revoked access token."


class AccessTokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None  # not ours: let the session have a go
        if len(parts) != 2:
            raise AuthenticationFailed("Send the token as 'Authorization: Bearer <token>'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(INVALID_TOKEN) from None
        if not raw.isprintable():  # never looked up: PostgreSQL refuses NULs even in a query
            raise AuthenticationFailed(INVALID_TOKEN)
        token = access_token_for(raw)
        if token is None:
            raise AuthenticationFailed(INVALID_TOKEN)
        access_token_touch(token=token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Makes unauthenticated requests answer 401 (not 403) with a challenge.
        return 'Bearer realm="api"'
