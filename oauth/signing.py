"""The signing keys of each tenant (ES256, joserfc): its embedded authorization server's
access tokens and its signed caller assertions (``oauth.connections.assertions``).

A tenant has one key that signs (made on its first token) and names it in every token's
``kid``. Rotating (``manage.py oauth_rotate_signing_key --tenant SLUG``) retires it and makes
a new one that signs from then on; a retired key stays published, and verifies, until the
last token or assertion it signed has expired (``published_keys``), so a rotation never
refuses a good token, and rotations may follow each other as often as needed.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from joserfc import jwt
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jwk import ECKey, KeySet, generate_key
from joserfc.jws import extract_compact

from oauth.models import SigningKey
from oauth.sealing import seal, unseal
from tenants.models import Tenant

ALGORITHM = "ES256"
# How long a signed caller assertion is good: long enough for one request to arrive, short
# enough that a leaked one is soon useless.
CALLER_ASSERTION_SECONDS = 60


def _new_key(tenant: Tenant) -> SigningKey:
    key: ECKey = generate_key("EC", "P-256", parameters={"alg": ALGORITHM, "use": "sig"}, auto_kid=True)
    private = key.as_dict(private=True)
    public = key.as_dict(private=False)
    return SigningKey(
        tenant=tenant,
        kid=str(public["kid"]),
        algorithm=ALGORITHM,
        public_jwk=public,
        private_jwk_sealed=seal(json.dumps(private, separators=(",", ":"))),
    )


def _verifies_since() -> datetime:
    """A key retired before this moment signed no token (and no caller assertion) that is still good."""
    longest = max(settings.TOOLBAY_OAUTH_ACCESS_TOKEN_SECONDS, CALLER_ASSERTION_SECONDS)
    lifetime = longest + settings.TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS
    return timezone.now() - timedelta(seconds=lifetime)


def published_keys(tenant_id: int) -> QuerySet[SigningKey]:
    """The tenant's keys that verify: the one that signs, and retired ones (its own, and the
    shared keys of before per-tenant keys) whose last token has not expired yet."""
    return SigningKey.objects.filter(
        Q(tenant_id=tenant_id) | Q(tenant__isnull=True),
        Q(retired_at__isnull=True) | Q(retired_at__gt=_verifies_since()),
    ).order_by("-created_at")


def signing_key(tenant: Tenant) -> ECKey:
    """The key that signs the tenant's tokens now (made if it has none; the constraint
    ``signingkey_one_signing_per_tenant`` makes concurrent first requests agree on one)."""
    row = SigningKey.objects.filter(tenant=tenant, retired_at__isnull=True).first()
    if row is None:
        try:
            with transaction.atomic():
                row = _new_key(tenant)
                row.save()
        except IntegrityError:  # another request made it at the same moment: use that one
            row = SigningKey.objects.get(tenant=tenant, retired_at__isnull=True)
    key = ECKey.import_key(json.loads(unseal(row.private_jwk_sealed, name=f"signing key {row.kid}")))
    key.ensure_kid()
    return key


def public_jwks(tenant_id: int) -> dict[str, Any]:
    """The JWKS of every key that verifies the tenant's tokens (its ``jwks_uri`` document)."""
    return {"keys": [dict(row.public_jwk) for row in published_keys(tenant_id)]}


def public_key_set(tenant_id: int) -> KeySet:
    return KeySet.import_key_set(public_jwks(tenant_id))  # type: ignore[arg-type]


def decode_access_token(token: str, keys: KeySet) -> jwt.Token:
    """Verify an access token of the embedded server against the tenant's published ``keys``:
    with the key its ``kid`` names, or, for a token from before tokens carried ``kid``, with
    each of them in turn (a handful at most). Raises joserfc's errors (``JoseError``)."""
    header = extract_compact(token.encode("ascii")).headers()
    if header.get("kid") is not None:
        return jwt.decode(token, keys, algorithms=[ALGORITHM])
    failure: JoseError = BadSignatureError()
    for key in keys.keys:
        try:
            return jwt.decode(token, key, algorithms=[ALGORITHM])
        except BadSignatureError as exc:
            failure = exc
    raise failure


@transaction.atomic
def rotate(tenant: Tenant) -> SigningKey:
    """A new signing key for the tenant; the one that signed until now retires and keeps
    verifying until its last token expires."""
    # Two rotations of one tenant at once take turns; a first key that a token request makes
    # meanwhile makes this insert fail (the constraint) rather than leave two keys signing.
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    SigningKey.objects.filter(tenant=tenant, retired_at__isnull=True).update(retired_at=timezone.now())
    key = _new_key(tenant)
    key.save()
    return key
