"""Who is acting: set by the middleware (admin, API) and by management commands.

The change audit (``audit.signals``) reads it to attribute a change; anything else (a
shell, a worker) is "system". It lives below every app, so any app's commands can set it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Actor:
    source: str
    request: Any = None  # the HttpRequest, so the user is read after authentication ran
    label: str = ""

    def user(self) -> Any:
        user = getattr(self.request, "user", None)
        return user if getattr(user, "is_authenticated", False) else None

    def describe(self) -> str:
        user = self.user()
        return user.get_username() if user is not None else self.label


_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("toolbay_actor", default=None)


def current_actor() -> Actor:
    return _actor.get() or Actor(source="system", label="system")


@contextlib.contextmanager
def acting_as(actor: Actor) -> Iterator[None]:
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)
