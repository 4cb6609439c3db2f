"""Backend secrets: encryption at rest, writes, and the lookups backends make.

Secrets are Fernet tokens under ``settings.TOOLBAY_SECRET_KEYS`` (MultiFernet: the first
key encrypts, every key decrypts). Rotating the key: put a new key first, run
``manage.py rotate_backend_secrets`` (re-encrypts every row with it), then drop the old
key. A plaintext leaves this module only towards the backend that sends it; it is never
logged, never part of an exception message, never rendered.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from tenants.models import Tenant
from tools_app.backends.cache import GenerationCache
from tools_app.backends.models import BackendSecret, owned_by

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
# Shorter values would redact ordinary words from error texts; secrets are longer anyway.
MIN_REDACTED_LENGTH = 4


class SecretUnavailable(Exception):
    """A secret is missing or cannot be decrypted; the message names it, never its value."""


@functools.lru_cache(maxsize=4)
def _multi_fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def _cipher() -> MultiFernet:
    return _multi_fernet(tuple(settings.TOOLBAY_SECRET_KEYS))


def seal(plaintext: str) -> str:
    return _cipher().encrypt(plaintext.encode()).decode("ascii")


def unseal(ciphertext: str, *, name: str = "?") -> str:
    try:
        return _cipher().decrypt(ciphertext.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise SecretUnavailable(
            f"secret {name!r} cannot be decrypted with the configured TOOLBAY_SECRET_KEYS"
        ) from None


# --- writes ------------------------------------------------------------------------------


@transaction.atomic
def secret_set(
    *, tenant: Tenant | None, name: str, value: str, description: str = "", created_by: Any = None
) -> BackendSecret:
    """Create the secret, or replace the value of the tenant's secret of that name."""
    secret = BackendSecret.objects.select_for_update().filter(tenant=tenant, name=name).first()
    if secret is None:
        secret = BackendSecret(tenant=tenant, name=name, created_by=created_by)
    secret.description = description or secret.description
    secret.ciphertext = seal(value)
    secret.full_clean(exclude=["ciphertext"])
    secret.save()
    return secret


def secret_store_value(*, secret: BackendSecret, value: str) -> None:
    """Put a new value into an unsaved or saved secret (the admin's form path)."""
    secret.ciphertext = seal(value)


def secrets_rotate(*, batch_size: int = 500) -> tuple[int, list[str]]:
    """Re-encrypt every secret with the first key; returns how many rows changed and the
    names of secrets no configured key opens (left as they are)."""
    cipher = _cipher()
    rotated = 0
    unreadable: list[str] = []
    last_id = 0
    while True:
        with transaction.atomic():
            batch = list(BackendSecret.objects.select_for_update().filter(pk__gt=last_id).order_by("pk")[:batch_size])
            if not batch:
                return rotated, unreadable
            for secret in batch:
                try:
                    new = cipher.rotate(secret.ciphertext.encode("ascii")).decode("ascii")
                except InvalidToken:
                    log.error("secret %s (id %s) cannot be decrypted with any configured key", secret.name, secret.pk)
                    unreadable.append(str(secret))
                    continue
                if new != secret.ciphertext:
                    BackendSecret.objects.filter(pk=secret.pk).update(ciphertext=new)
                    rotated += 1
            last_id = batch[-1].pk


# --- reads -------------------------------------------------------------------------------


def secrets_of(tenant_id: int | None) -> QuerySet[BackendSecret]:
    """The secrets a tool or upstream of this tenant may use (platform: tenant None)."""
    return BackendSecret.objects.filter(owned_by(tenant_id))


def secret_exists(tenant_id: int | None, name: str) -> bool:
    return secrets_of(tenant_id).filter(name=name).exists()


def _load_plaintext(key: tuple[int | None, str]) -> str | None:
    tenant_id, name = key
    secret = secrets_of(tenant_id).filter(name=name).only("ciphertext", "name").first()
    if secret is None:
        return None
    return unseal(secret.ciphertext, name=name)


_plaintexts: GenerationCache[tuple[int | None, str], str] = GenerationCache(_load_plaintext)


async def secret_value(tenant_id: int | None, name: str) -> str:
    """The plaintext of the tenant's secret ``name``; raises SecretUnavailable."""
    value = await _plaintexts.get((tenant_id, name))
    if value is None:
        raise SecretUnavailable(f"secret {name!r} is not configured")
    return value


def clear_cache() -> None:
    _plaintexts.clear()


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of the given secret values replaced."""
    for value in sorted({v for v in values if len(v) >= MIN_REDACTED_LENGTH}, key=len, reverse=True):
        text = re.sub(re.escape(value), REDACTED, text, flags=re.IGNORECASE)
    return text
