"""How v1 lists page: by an opaque cursor, never by offset."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class IdCursorPagination(CursorPagination):
    """Every list pages by an opaque cursor over ids: stable under inserts, fast on big tables."""

    ordering: str | tuple[str, ...] = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class NewestFirstPagination(IdCursorPagination):
    ordering = "-id"


class InvocationPagination(IdCursorPagination):
    """Newest first, along the (tenant, -started_at, -id) index."""

    ordering = ("-started_at", "-id")


class AuditEventPagination(IdCursorPagination):
    ordering = ("-created_at", "-id")


class TenantCursorPagination(IdCursorPagination):
    """For rows keyed by their tenant (one per tenant)."""

    ordering = "tenant_id"
