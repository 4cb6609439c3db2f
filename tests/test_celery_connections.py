"""A Celery worker keeps its database connection between tasks, as the web side does between requests."""

from __future__ import annotations

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.db import connection

from mcp_platform.celery import app
from tools_app.runs.tasks import execute_run

# Outside a test transaction: inside one, Django never really closes the connection.
pytestmark = pytest.mark.django_db(transaction=True)


def run_task_signals(fixup: DjangoWorkerFixup) -> None:
    """What a worker does around a task: the fix-up's handlers and the project's."""
    fixup.on_task_prerun(sender=execute_run)
    task_prerun.send(sender=execute_run, task_id="t", task=execute_run)
    fixup.on_task_postrun(sender=execute_run)
    task_postrun.send(sender=execute_run, task_id="t", task=execute_run)


def test_a_worker_reuses_its_database_connection_across_tasks() -> None:
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    opened = connection.connection
    for _ in range(5):
        run_task_signals(fixup)
        assert connection.connection is opened  # a new PostgreSQL connection costs a call ~10 ms


def test_a_connection_left_broken_is_replaced_before_the_next_task() -> None:
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    connection.errors_occurred = True
    connection.health_check_done = False
    connection.connection.close()  # as after a database restart
    run_task_signals(fixup)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
