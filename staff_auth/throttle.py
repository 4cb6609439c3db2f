"""Throttling of password sign-in, per client address and per account.

Failures are counted in Redis (shared by every process; a counter lives for the cool-off
after its last failure). A counter that reaches its limit becomes a ``SignInLockout`` row —
audited, listed in the admin, where deleting it lifts the lockout — and starts again from
zero. While a lockout holds, sign-in is refused before the password is even checked.

The address limit is the low one (one machine guessing), the account limit the high one
(many machines guessing one account's password): with the defaults a staff member whose
account is under attack from elsewhere can still sign in from their own address until the
attack itself has made 50 attempts in the cool-off.
"""

from __future__ import annotations

import hashlib
import math
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from audit.services import audit_change, snapshot
from mcp_platform.redis_clients import sync_redis
from staff_auth.models import SignInLockout

Kind = SignInLockout.Kind
_PREFIX = "toolbay:signin:failures"


def _account_key(username: str) -> str:
    # Django usernames compare exactly, but a guesser varying case is still one guesser.
    return username.strip().lower()[:150]


def _counter(kind: str, key: str) -> str:
    return f"{_PREFIX}:{kind}:{hashlib.sha256(key.encode()).hexdigest()}"


def refusal(*, username: str, address: str) -> str | None:
    """Why sign-in is refused right now for this account from this address, or None."""
    now = timezone.now()
    lockout = (
        SignInLockout.objects.filter(
            Q(kind=Kind.ADDRESS, key=address) | Q(kind=Kind.ACCOUNT, key=_account_key(username)),
            locked_until__gt=now,
        )
        .order_by("-locked_until")
        .first()
    )
    if lockout is None:
        return None
    minutes = max(1, math.ceil((lockout.locked_until - now).total_seconds() / 60))
    whom = "from this address" if lockout.kind == Kind.ADDRESS else "for this account"
    return (
        f"Too many failed sign-ins {whom}. Sign-in is blocked for {minutes} more minute"
        f"{'s' if minutes != 1 else ''}; ask an administrator if you need in sooner."
    )


def record_failure(*, username: str, address: str) -> None:
    """Counts one failed password sign-in; locks out the address or the account at its limit."""
    cooloff = settings.TOOLBAY_LOGIN_COOLOFF_SECONDS
    counters = (
        (Kind.ADDRESS, address, settings.TOOLBAY_LOGIN_MAX_FAILURES_PER_ADDRESS),
        (Kind.ACCOUNT, _account_key(username), settings.TOOLBAY_LOGIN_MAX_FAILURES_PER_ACCOUNT),
    )
    pipe = sync_redis().pipeline(transaction=True)
    for kind, key, _limit in counters:
        pipe.incr(_counter(kind, key))
        pipe.expire(_counter(kind, key), cooloff)
    counts = pipe.execute()[0::2]
    for (kind, key, limit), count in zip(counters, counts, strict=True):
        # DELETE returns 1 to exactly one of several processes that saw the limit reached.
        if count >= limit and sync_redis().delete(_counter(kind, key)):
            lockout = SignInLockout.objects.create(
                kind=kind, key=key, failures=count, locked_until=timezone.now() + timedelta(seconds=cooloff)
            )
            audit_change(lockout, "created", None, snapshot(lockout))
