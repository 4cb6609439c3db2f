"""System checks of the catalog against the deployment's settings (``manage.py check
--database default``, and ``migrate``, which every start path runs first: ``make run``, the
compose file's ``migrate`` service, the Procfile's ``release``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core import checks
from django.db import DatabaseError
from django.db.models import Q

from tools_app.catalog.models import Tool
from tools_app.catalog.validation import WORKER_SLACK_SECONDS, longest_worker_timeout, visibility_timeout

T = TypeVar("T")


def tools_outliving_the_broker() -> list[Tool]:
    """Enabled tools that can run on a worker with a timeout the broker's visibility timeout
    cannot hold (see ``worker_timeout_error``)."""
    on_workers = Q(execution_mode=Tool.ExecutionMode.BACKGROUND) | ~Q(task_support=Tool.TaskSupport.FORBIDDEN)
    return list(
        Tool.objects.filter(on_workers, enabled=True, timeout_seconds__gt=longest_worker_timeout())
        .select_related("tenant")
        .order_by("-timeout_seconds", "name")
    )


def tool_timeout_problem() -> str:
    """What an operator must change, or "" when every worker tool fits."""
    tools = tools_outliving_the_broker()
    if not tools:
        return ""
    needed = tools[0].timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + WORKER_SLACK_SECONDS
    names = ", ".join(f"{tool} ({tool.timeout_seconds:g} s)" for tool in tools[:10])
    return (
        f"Tools that run on Celery workers have timeouts longer than CELERY_VISIBILITY_TIMEOUT="
        f"{visibility_timeout()} s allows ({longest_worker_timeout():g} s): {names}. The broker would "
        f"hand such a call, still running, to a second worker. Set CELERY_VISIBILITY_TIMEOUT to at "
        f"least {needed:g} on every process, or lower those timeouts."
    )


def read_catalog_for_check(databases: Any, read: Callable[[], T]) -> T | None:
    """What ``read`` finds in the catalog for a database check, or None when it may not look."""
    if not databases:
        return None  # Django runs checks that read the database only when asked to (migrate, check --database)
    try:
        return read()
    except DatabaseError:
        return None  # no catalog yet: migrate checks before it migrates, and the next start checks again


@checks.register(checks.Tags.database)
def check_tool_timeouts(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    problem = read_catalog_for_check(databases, tool_timeout_problem)
    return [checks.Error(problem, id="tools_app.E001")] if problem else []
