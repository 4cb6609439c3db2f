"""Invocations older than AUDIT_RETENTION_DAYS are purged by a periodic task, in batches."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from audit.models import AuditEvent, Invocation
from audit.retention import invocations_purge
from audit.tasks import purge_old_invocations


def test_the_purge_is_scheduled():
    entry = settings.CELERY_BEAT_SCHEDULE["purge-old-invocations"]
    assert entry["task"] == purge_old_invocations.name == "audit.tasks.purge_old_invocations"


def test_old_invocations_go_recent_ones_stay(acme, make_invocation):
    old = [make_invocation(acme, "old", ago=timedelta(days=31, minutes=i)) for i in range(3)]
    recent = make_invocation(acme, "recent", ago=timedelta(days=29))
    events = AuditEvent.objects.count()
    with override_settings(AUDIT_RETENTION_DAYS=30):
        assert purge_old_invocations() == 3
    assert not Invocation.objects.filter(pk__in=[row.pk for row in old]).exists()
    assert Invocation.objects.filter(pk=recent.pk).exists()
    assert AuditEvent.objects.count() == events  # the change audit is never purged


def test_zero_keeps_everything(acme, make_invocation):
    make_invocation(acme, "ancient", ago=timedelta(days=3650))
    with override_settings(AUDIT_RETENTION_DAYS=0):
        assert purge_old_invocations() == 0
    assert Invocation.objects.filter(tenant=acme).count() == 1


def test_purging_runs_in_batches(acme, make_invocation, django_assert_max_num_queries):
    for i in range(25):
        make_invocation(acme, "old", ago=timedelta(days=100, seconds=i))
    make_invocation(acme, "new")
    with django_assert_max_num_queries(6 * 2 + 1):  # per batch: select ids, delete them
        assert invocations_purge(older_than=timezone.now() - timedelta(days=50), batch_rows=5) == 25
    assert list(Invocation.objects.filter(tenant=acme).values_list("tool_name", flat=True)) == ["new"]


def test_a_run_stops_at_its_time_budget(acme, make_invocation):
    for i in range(10):
        make_invocation(acme, "old", ago=timedelta(days=100, seconds=i))
    cutoff = timezone.now() - timedelta(days=50)
    assert invocations_purge(older_than=cutoff, batch_rows=2, max_seconds=0) == 2  # one batch, then stop
    assert Invocation.objects.filter(tenant=acme).count() == 8
