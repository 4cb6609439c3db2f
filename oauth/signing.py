"""The embedded authorization server's signing keys (ES256, joserfc).

One key signs; every key not retired verifies (so tokens signed before a rotation stay
valid until they expire). The first key is made on first use. Rotating (``manage.py
oauth_rotate_signing_key``) makes a new key and retires all but it and the one before, so
rotate at most once per access-token lifetime.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from joserfc.jwk import ECKey, KeySet, generate_key

from oauth.models import SigningKey
from oauth.sealing import seal, unseal

ALGORITHM = "ES256"


def _new_key() -> SigningKey:
    key: ECKey = generate_key("EC", "P-256", parameters={"alg": ALGORITHM, "use": "sig"}, auto_kid=True)
    private = key.as_dict(private=True)
    public = key.as_dict(private=False)
    return SigningKey(
        kid=str(public["kid"]),
        algorithm=ALGORITHM,
        public_jwk=public,
        private_jwk_sealed=seal(json.dumps(private, separators=(",", ":"))),
    )


def signing_key() -> ECKey:
    """The key that signs now (made if there is none)."""
    row = SigningKey.objects.filter(retired_at__isnull=True).order_by("-created_at").first()
    if row is None:
        try:
            with transaction.atomic():
                row = _new_key()
                row.save()
        except IntegrityError:  # another process made one at the same moment
            row = SigningKey.objects.filter(retired_at__isnull=True).order_by("-created_at").first()
            assert row is not None
    return ECKey.import_key(json.loads(unseal(row.private_jwk_sealed, name=f"signing key {row.kid}")))


def public_jwks() -> dict[str, Any]:
    """The JWKS of every key that verifies (the ``jwks_uri`` document)."""
    rows = SigningKey.objects.filter(retired_at__isnull=True).order_by("-created_at")
    return {"keys": [dict(row.public_jwk) for row in rows]}


def public_key_set() -> KeySet:
    return KeySet.import_key_set(public_jwks())  # type: ignore[arg-type]


@transaction.atomic
def rotate() -> SigningKey:
    """A new signing key; the one that signed until now keeps verifying, older ones retire."""
    previous = list(SigningKey.objects.filter(retired_at__isnull=True).order_by("-created_at")[:1])
    key = _new_key()
    key.save()
    keep = [key.pk, *(row.pk for row in previous)]
    SigningKey.objects.filter(retired_at__isnull=True).exclude(pk__in=keep).update(retired_at=timezone.now())
    return key
