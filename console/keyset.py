"""Keyset pagination over (timestamp, id), newest first: no OFFSET, so page 1,000 costs what
page 1 does (the indexes lead with tenant, then time descending, then id).

A cursor is "<microseconds since the epoch>.<id>" of the row a page starts after (older
rows) or before (newer rows). It only says where to continue; what may be seen is decided
by the queryset it is applied to, so a forged cursor shows nothing new.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from django.db.models import Model, Q, QuerySet

M = TypeVar("M", bound=Model)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Cursor:
    at: datetime
    id: int

    def encode(self) -> str:
        delta = self.at - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{micros}.{self.id}"

    @classmethod
    def decode(cls, raw: str | None) -> Cursor | None:
        """The cursor, or None for an absent or malformed one (the first page)."""
        if not raw:
            return None
        micros, _, pk = raw.partition(".")
        try:
            return cls(_EPOCH + timedelta(microseconds=int(micros)), int(pk))
        except (ValueError, OverflowError):
            return None

    @classmethod
    def of(cls, row: Model, time_field: str) -> Cursor:
        return cls(getattr(row, time_field), row.pk)


def older_than(cursor: Cursor, time_field: str) -> Q:
    # The "<=" alone is what bounds the index range scan; the OR only breaks ties.
    return Q(**{f"{time_field}__lte": cursor.at}) & (Q(**{f"{time_field}__lt": cursor.at}) | Q(**{"pk__lt": cursor.id}))


def newer_than(cursor: Cursor, time_field: str) -> Q:
    return Q(**{f"{time_field}__gte": cursor.at}) & (Q(**{f"{time_field}__gt": cursor.at}) | Q(**{"pk__gt": cursor.id}))


@dataclass
class Page(Generic[M]):
    rows: list[M]
    newer: Cursor | None  # pass as ?before= for the previous (newer) page; None on the first
    older: Cursor | None  # pass as ?after= for the next (older) page; None on the last


def page_of(
    queryset: QuerySet[M], time_field: str, *, size: int, after: Cursor | None = None, before: Cursor | None = None
) -> Page[M]:
    """One page, newest first, of the rows older than ``after`` or newer than ``before``."""
    newest_first = (f"-{time_field}", "-pk")
    if before is not None:
        chunk = list(queryset.filter(newer_than(before, time_field)).order_by(time_field, "pk")[: size + 1])
        more_newer = len(chunk) > size
        rows = list(reversed(chunk[:size]))
        return Page(
            rows=rows,
            newer=Cursor.of(rows[0], time_field) if rows and more_newer else None,
            older=Cursor.of(rows[-1], time_field) if rows else None,
        )
    scoped = queryset.filter(older_than(after, time_field)) if after is not None else queryset
    chunk = list(scoped.order_by(*newest_first)[: size + 1])
    rows = chunk[:size]
    return Page(
        rows=rows,
        newer=Cursor.of(rows[0], time_field) if rows and after is not None else None,
        older=Cursor.of(rows[-1], time_field) if len(chunk) > size else None,
    )


def chunks(queryset: QuerySet[M], time_field: str, size: int) -> Iterator[list[M]]:
    """Every row, newest first, ``size`` rows per query: memory stays at one chunk."""
    cursor: Cursor | None = None
    while True:
        page = page_of(queryset, time_field, size=size, after=cursor)
        if page.rows:
            yield page.rows
        if page.older is None:
            return
        cursor = page.older
