"""The Celery application; workers start with `celery -A mcp_platform worker`."""

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")

app = Celery("mcp_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Task modules live in the apps' parts (tools_app/runs/tasks.py), not at the apps' top level.
app.autodiscover_tasks(["tools_app.runs", "audit"])


@task_prerun.connect
@task_postrun.connect
def _database_connections_as_for_a_request(**_: Any) -> None:
    """Keep a worker's database connection between tasks, as the web side does between requests.

    Celery's Django fix-up closes it around every task unless CELERY_DB_REUSE_MAX is set (a
    new PostgreSQL connection costs a background call about 10 ms); with it set, Django's own
    rule applies instead: a connection older than CONN_MAX_AGE or left broken by an error is
    closed, and CONN_HEALTH_CHECKS tests a reused one before its first query.
    """
    from django.db import close_old_connections

    close_old_connections()
