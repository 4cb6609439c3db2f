"""A tool that can run on a Celery worker may not outlive the broker's visibility timeout
(CELERY_VISIBILITY_TIMEOUT): saving one is refused, and so is starting (migrate, check
--database) with one in the catalog; each message says which setting to raise."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tools_app.catalog.checks import check_tool_timeouts
from tools_app.catalog.models import Tool
from tools_app.catalog.validation import longest_worker_timeout

pytestmark = pytest.mark.django_db


def tool(name: str = "long", **fields: Any) -> Tool:
    return Tool(name=name, description="Takes long.", backend_config={"handler": "demo.echo"}, **fields)


def test_the_default_allows_a_little_under_two_hours() -> None:
    # 7200 s visibility, 2 s cancel grace, a minute of slack.
    assert longest_worker_timeout() == 7200 - 2 - 60


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"execution_mode": "background", "timeout_seconds": 7200}, True),
        ({"execution_mode": "inline", "task_support": "optional", "timeout_seconds": 7200}, True),
        ({"execution_mode": "background", "timeout_seconds": 7138}, False),
        ({"execution_mode": "inline", "timeout_seconds": 86400}, False),  # never on a worker
    ],
)
def test_saving_a_longer_worker_timeout_is_refused(fields: dict[str, Any], refused: bool) -> None:
    candidate = tool(**fields)
    if not refused:
        candidate.full_clean()
        return
    with pytest.raises(ValidationError) as error:
        candidate.full_clean()
    (message,) = error.value.message_dict["timeout_seconds"]
    assert "CELERY_VISIBILITY_TIMEOUT=7200 s: at most 7138 s fits" in message
    assert "set CELERY_VISIBILITY_TIMEOUT to at least 7262 on every process" in message


def test_a_larger_visibility_timeout_allows_it(settings: Any) -> None:
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "visibility_timeout": 90000}
    tool(execution_mode="background", timeout_seconds=86400).full_clean()


def test_start_up_refuses_a_catalog_the_broker_cannot_hold(settings: Any) -> None:
    # Saved while the visibility timeout was larger (or straight into the database).
    Tool.objects.create(name="nightly", description="d", execution_mode="background", timeout_seconds=10000)
    Tool.objects.create(name="off", description="d", execution_mode="background", timeout_seconds=20000, enabled=False)
    with pytest.raises(SystemCheckError) as error:
        call_command("check", "--database", "default")
    message = str(error.value)
    assert "tools_app.E001" in message and "nightly (10000 s)" in message and "off" not in message
    assert "Set CELERY_VISIBILITY_TIMEOUT to at least 10062 on every process" in message
    call_command("check")  # without the database, as makemigrations runs it: nothing read

    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "visibility_timeout": 10062}
    assert check_tool_timeouts(databases=["default"]) == []
