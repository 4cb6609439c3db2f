"""Python handlers, registered in code by name, each offered to the catalogs that may bind it.

The admin and the REST API accept only registered names, so their input can never point at
an arbitrary import path. Tool authors register through ``tools_app.handlers`` (the public
API); a pack module (``tools_app.packs``) decorates its handlers and lists the definitions
(``tools_app.catalog.definitions``) that ``seed_demo`` installs.

**Which catalogs may bind a handler.** A handler is code the operator deployed; whether a
tenant admin may point a private tool at it is the operator's decision, made where the
handler is registered: ``catalogs=()`` (the default) offers it to the platform catalog only,
``catalogs=("acme", "globex")`` also to those tenants' private catalogs, and
``catalogs=EVERY_CATALOG`` to every tenant. The platform catalog may bind every handler.
A catalog that may not bind a handler is told it does not exist, and lists of handlers show
each caller only those it may bind.

A tool handler is ``async def handler(ctx: ToolContext, arguments: dict) -> ToolOutput`` (or a
plain ``def`` with the same shape, which runs in a worker thread with a blocking context).
A resource handler is ``async def handler(uri: str, variables: dict[str, str]) -> …``
returning text (str), bytes, or a list of ResourceContents dicts; a prompt handler
``async def handler(arguments: dict[str, str]) -> …`` returning a list of PromptMessage
dicts or a GetPromptResult dict; a completion handler
``async def handler(argument: str, value: str, context: dict[str, str]) -> list[str]``.
Plain ``def`` handlers run in a worker thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Handler = Callable[..., Any]
HandlerKind = Literal["tool", "resource", "prompt", "completion"]

EVERY_CATALOG: Final = "*"
"""``catalogs=EVERY_CATALOG``: every tenant's private catalog may bind the handler."""

Catalogs = Iterable[str] | Literal["*"]


@dataclass(frozen=True)
class Registration:
    """One registered handler: ``catalogs`` is None for every catalog, else the tenant slugs
    (besides the platform catalog) that may bind it."""

    name: str
    handler: Handler
    catalogs: frozenset[str] | None
    # Decided once here: inspect's check costs a call's worth of attribute lookups each time.
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))

    def offered_to(self, catalog: str | None) -> bool:
        """Whether the catalog (a tenant's slug; None: the platform's) may bind this handler."""
        return catalog is None or self.catalogs is None or catalog in self.catalogs


_tables: dict[HandlerKind, dict[str, Registration]] = {"tool": {}, "resource": {}, "prompt": {}, "completion": {}}


def _catalog_set(catalogs: Catalogs) -> frozenset[str] | None:
    if catalogs == EVERY_CATALOG:
        return None
    if isinstance(catalogs, str):
        # One slug passed as a string would otherwise be read letter by letter.
        raise TypeError(f'catalogs must be EVERY_CATALOG or a list of tenant slugs, not the string "{catalogs}"')
    return frozenset(catalogs)


def register(kind: HandlerKind, name: str, handler: Handler, *, catalogs: Catalogs = ()) -> None:
    """Register ``handler`` under ``name``; names are unique per kind."""
    table = _tables[kind]
    known = table.get(name)
    if known is not None and known.handler is not handler:
        raise ValueError(f"{kind} handler {name!r} is already registered")
    table[name] = Registration(name, handler, _catalog_set(catalogs))


def _decorator(kind: HandlerKind) -> Callable[..., Callable[[Handler], Handler]]:
    def decorator(name: str, *, catalogs: Catalogs = ()) -> Callable[[Handler], Handler]:
        def registered(fn: Handler) -> Handler:
            register(kind, name, fn, catalogs=catalogs)
            return fn

        return registered

    decorator.__name__ = f"{kind}_handler"
    decorator.__doc__ = (
        f'Register the decorated function as the {kind} handler ``name`` (e.g. ``"acme.greet"``), '
        "offered to the platform catalog and to ``catalogs`` (tenant slugs, or EVERY_CATALOG)."
    )
    return decorator


tool_handler = _decorator("tool")
resource_handler = _decorator("resource")
prompt_handler = _decorator("prompt")
completion_handler = _decorator("completion")


def handler_of(kind: HandlerKind, name: str) -> Handler | None:
    """The handler registered under ``name`` for ``kind``, whoever may bind it (calls run
    what was bound when the tool was saved)."""
    registration = _tables[kind].get(name)
    return registration.handler if registration is not None else None


def registration_of(kind: HandlerKind, name: str) -> Registration | None:
    """The registration of ``name`` for ``kind`` (its handler, and whether it is async)."""
    return _tables[kind].get(name)


def is_offered(kind: HandlerKind, name: str, catalog: str | None) -> bool:
    """Whether ``name`` is registered and the catalog (a tenant's slug; None: the platform's)
    may bind it. Unknown and not offered are the same answer."""
    registration = _tables[kind].get(name)
    return registration is not None and registration.offered_to(catalog)


def names_of(kind: HandlerKind, catalogs: Collection[str | None] | None = None) -> list[str]:
    """The names any of ``catalogs`` (tenant slugs; None in it: the platform's) may bind;
    ``catalogs=None``: every registered name."""
    return sorted(
        name
        for name, registration in _tables[kind].items()
        if catalogs is None or any(registration.offered_to(catalog) for catalog in catalogs)
    )
