"""``manage.py audit_writer``: write the invocation journal to the database until stopped.

SIGINT or SIGTERM stops it after the batch in hand is written and acknowledged.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from audit.writer import JournalWriter
from mcp_platform.redis_clients import sync_redis


class Command(BaseCommand):
    help = "Write invocation rows from the Redis audit journal to the database (run at least one)."

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        writer = JournalWriter(
            sync_redis(),
            batch_rows=settings.AUDIT_WRITER_BATCH_ROWS,
            claim_idle_seconds=settings.AUDIT_WRITER_CLAIM_IDLE_SECONDS,
            linger_seconds=settings.AUDIT_WRITER_LINGER_MS / 1000,
        )
        writer.run(stop.is_set)
        self.stdout.write(
            f"audit writer {writer.name} stopped: {writer.written} rows written, {writer.quarantined} quarantined"
        )
