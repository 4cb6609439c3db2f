"""Celery tasks of the audit log (thin: the work is in audit.retention)."""

from __future__ import annotations

from celery import shared_task

from audit.retention import invocations_purge_expired


@shared_task(name="audit.tasks.purge_old_invocations")
def purge_old_invocations() -> int:
    return invocations_purge_expired()
