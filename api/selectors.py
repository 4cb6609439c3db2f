"""Reads about personal access tokens."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.utils import timezone

from api.models import PersonalAccessToken
from api.services import TOKEN_SCHEME
from tenants import keys


def access_tokens_of(user: AbstractBaseUser) -> QuerySet[PersonalAccessToken]:
    return PersonalAccessToken.objects.filter(user_id=user.pk)


def access_token_for(raw: str) -> PersonalAccessToken | None:
    """The usable token behind a raw ``tbp_`` token (with its active user), or None.

    Unknown, revoked and expired tokens and tokens of inactive users all answer None so
    callers cannot tell them apart.
    """
    prefix = keys.parse_prefix(raw, scheme=TOKEN_SCHEME)
    if prefix is None:
        return None
    token = PersonalAccessToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not keys.key_matches(raw, token.token_hash) or not token.is_usable(timezone.now()):
        return None
    if not token.user.is_active:
        return None
    return token
