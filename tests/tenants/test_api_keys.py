"""API keys: stored only as prefix + SHA-256, and authenticated per tenant."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tenants.models import ApiKey
from tenants.services import api_key_create, api_key_revoke
from tests.credentials import authenticate


def test_raw_key_is_not_stored(acme, make_key) -> None:
    key, raw = make_key(acme, scopes=["tools:read"])
    scheme, prefix, secret = raw.split("_", 2)
    assert scheme == "tbk"
    assert key.prefix == prefix
    assert len(secret) >= 40  # 32 random bytes, url-safe base64
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    row = ApiKey.objects.filter(pk=key.pk).values().get()
    assert not any(isinstance(value, str) and secret in value for value in row.values())


def test_keys_are_unique(acme, make_key) -> None:
    (a, raw_a), (b, raw_b) = make_key(acme, "a"), make_key(acme, "b")
    assert raw_a != raw_b and a.prefix != b.prefix and a.key_hash != b.key_hash


def test_right_key_authenticates(acme, make_key) -> None:
    key, raw = make_key(acme, scopes=["tools:read", "tools:call"])
    principal = authenticate(acme, raw)
    assert principal is not None
    assert (principal.tenant_id, principal.key_id, principal.key_prefix) == (acme.pk, key.pk, key.prefix)
    assert principal.scopes == frozenset({"tools:read", "tools:call"})


def test_wrong_secret_is_rejected(acme, make_key) -> None:
    key, raw = make_key(acme)
    tampered = raw[:-1] + ("A" if raw[-1] != "A" else "B")
    assert authenticate(acme, tampered) is None
    assert authenticate(acme, f"tbk_{key.prefix}_guess") is None


@pytest.mark.parametrize("raw", ["", "tbk", "tbk__x", "Bearer xyz", "tbk_short_secret", "xyz_123456789012_secret"])
def test_malformed_keys_are_rejected(acme, raw: str) -> None:
    assert authenticate(acme, raw) is None


def test_other_tenants_key_is_rejected(acme, globex, make_key) -> None:
    _, raw = make_key(globex)
    assert authenticate(acme, raw) is None
    assert authenticate(globex, raw) is not None


def test_revoked_key_is_rejected(acme, make_key) -> None:
    key, raw = make_key(acme)
    api_key_revoke(key=key)
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert authenticate(acme, raw) is None


def test_revoking_twice_keeps_the_first_time(acme, make_key) -> None:
    key, _ = make_key(acme)
    first = api_key_revoke(key=key).revoked_at
    assert api_key_revoke(key=ApiKey.objects.get(pk=key.pk)).revoked_at == first


def test_expired_key_is_rejected(acme, make_key) -> None:
    key, raw = make_key(acme, expires_at=timezone.now() + timedelta(hours=1))
    assert authenticate(acme, raw) is not None
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert authenticate(acme, raw) is None


def test_expiry_must_be_in_the_future(acme) -> None:
    with pytest.raises(ValidationError, match="future"):
        api_key_create(tenant=acme, name="late", expires_at=timezone.now() - timedelta(minutes=1))


def test_scopes_are_checked(acme) -> None:
    with pytest.raises(ValidationError):
        api_key_create(tenant=acme, name="bad", scopes=["has space"])
