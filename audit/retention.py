"""Retention of the invocation log: rows older than AUDIT_RETENTION_DAYS go, in batches.

Batches keep each DELETE short (row locks and WAL per statement stay small), so the
batched inserts of the call path never wait behind one huge delete. Change events
(AuditEvent) are append-only and never purged.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from audit.models import Invocation

log = logging.getLogger(__name__)

BATCH_ROWS = 5000
# One run stops after this long and leaves the rest to the next run (beat runs it hourly).
MAX_SECONDS = 120.0


def invocations_purge(*, older_than: datetime, batch_rows: int = BATCH_ROWS, max_seconds: float = MAX_SECONDS) -> int:
    """Delete invocations that started before ``older_than``; returns how many went."""
    deadline = time.monotonic() + max_seconds
    purged = 0
    while True:
        ids = list(
            Invocation.objects.filter(started_at__lt=older_than)
            .order_by("started_at")
            .values_list("pk", flat=True)[:batch_rows]
        )
        if not ids:
            break
        deleted, _ = Invocation.objects.filter(pk__in=ids).delete()
        purged += deleted
        if len(ids) < batch_rows or time.monotonic() >= deadline:
            break
    return purged


def invocations_purge_expired() -> int:
    """Apply AUDIT_RETENTION_DAYS (0 keeps everything)."""
    days = settings.AUDIT_RETENTION_DAYS
    if days <= 0:
        return 0
    purged = invocations_purge(older_than=timezone.now() - timedelta(days=days))
    if purged:
        log.info("purged %d invocations older than %d days", purged, days)
    return purged
