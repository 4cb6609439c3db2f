"""Signed caller assertions: a short-lived JWT an HTTP backend receives beside the request,
saying which tenant, subject, tool and call it serves, so the API can authorize the user
itself. Signed (ES256) with the tenant's signing key, the one its embedded authorization
server uses (rotated by ``oauth_rotate_signing_key``); the public keys are at
``/connect/<tenant>/jwks``, whether or not the tenant uses the embedded server."""

from __future__ import annotations

import time

from asgiref.sync import sync_to_async
from joserfc import jwt

from oauth.connections.services import public_base
from oauth.signing import ALGORITHM, CALLER_ASSERTION_SECONDS, signing_key
from tenants.models import Tenant
from tools_app.backends.base import BackendError
from tools_app.backends.connections import Caller


def issuer(slug: str) -> str:
    return f"{public_base().rstrip('/')}/connect/{slug}"


def _sign(caller: Caller, tool: str, call_id: str, audience: str) -> str:
    tenant = Tenant.objects.filter(pk=caller.tenant_id).first()
    if tenant is None:
        raise BackendError("the caller's tenant is gone")
    key = signing_key(tenant)
    now = int(time.time())
    claims = {
        "iss": issuer(tenant.slug),
        "aud": audience,
        "sub": caller.subject,
        "tenant": tenant.slug,
        "tool": tool,
        "call_id": call_id,
        "jti": call_id,
        "iat": now,
        "exp": now + CALLER_ASSERTION_SECONDS,
    }
    if caller.oauth_subject:
        claims["oauth_sub"] = caller.oauth_subject
    return jwt.encode({"alg": ALGORITHM, "kid": key.kid, "typ": "toolbay-caller+jwt"}, claims, key)


class Asserter:
    async def assertion(self, caller: Caller, *, tool: str, call_id: str, audience: str) -> str:
        return await sync_to_async(_sign)(caller, tool, call_id, audience)


asserter = Asserter()
