"""Writes about personal access tokens."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from api.models import PersonalAccessToken
from tenants import keys

TOKEN_SCHEME = "tbp"

# last_used_at is for humans ("is this token still in use?"); writing it at most once a
# minute keeps a busy script from turning every API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@transaction.atomic
def access_token_create(
    *, user: User, name: str, expires_at: datetime | None = None
) -> tuple[PersonalAccessToken, str]:
    """Create a token; returns it with the raw token, which is never stored or shown again."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    if PersonalAccessToken.objects.filter(user_id=user.pk, name=name).exists():
        raise ValidationError({"name": f"You already have a token named {name!r}."})
    generated = keys.generate_key(scheme=TOKEN_SCHEME)
    token = PersonalAccessToken(
        user=user, name=name, expires_at=expires_at, prefix=generated.prefix, token_hash=generated.hashed
    )
    token.full_clean(exclude=["prefix", "token_hash"], validate_constraints=False)
    token.save()
    return token, generated.raw


@transaction.atomic
def access_token_revoke(*, token: PersonalAccessToken) -> PersonalAccessToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def access_token_touch(*, token: PersonalAccessToken) -> None:
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        PersonalAccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
