"""Field checks for catalog entries and access rules, shared by model.clean(), the admin and services."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from tools_app.catalog.backend_kinds import backend_config_errors
from tools_app.catalog.schemas import SchemaProblem, check_object_schema

ICON_THEMES = ("light", "dark")


def check_icons(icons: Any) -> None:
    if not isinstance(icons, list):
        raise ValidationError('Icons must be a JSON list of objects like {"src": "https://…"}.')
    for index, icon in enumerate(icons):
        where = f"icon #{index + 1}"
        if not isinstance(icon, dict) or not isinstance(icon.get("src"), str):
            raise ValidationError(f"{where}: each icon needs a string 'src'.")
        if not icon["src"].startswith(("https://", "data:")):
            raise ValidationError(f"{where}: 'src' must be an https: or data: URI.")
        unknown = set(icon) - {"src", "mimeType", "sizes", "theme"}
        if unknown:
            raise ValidationError(f"{where}: unknown keys {sorted(unknown)}; allowed: src, mimeType, sizes, theme.")
        if "mimeType" in icon and not isinstance(icon["mimeType"], str):
            raise ValidationError(f"{where}: 'mimeType' must be a string.")
        if "sizes" in icon and not (isinstance(icon["sizes"], list) and all(isinstance(s, str) for s in icon["sizes"])):
            raise ValidationError(f"{where}: 'sizes' must be a list of strings such as [\"48x48\"].")
        if "theme" in icon and icon["theme"] not in ICON_THEMES:
            raise ValidationError(f"{where}: 'theme' must be 'light' or 'dark'.")


def check_string_list(value: Any, *, what: str) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValidationError(f"{what} must be a JSON list of non-empty strings.")


def tool_field_errors(
    *,
    input_schema: Any,
    output_schema: Any,
    icons: Any,
    tags: Any,
    backend_kind: str,
    backend_config: Any,
    description: str,
    tenant_id: int | None = None,
) -> dict[str, list[str]]:
    """Problems per field name; empty when the tool definition is usable.

    ``tenant_id`` is the tool's tenant: backends check that what their settings refer to
    (secrets, upstream servers) exists in that tenant's scope.
    """
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if not (description or "").strip():
        add("description", "A description is required: models use it to decide when to call the tool.")
    try:
        check_object_schema(input_schema, label="inputSchema")
    except SchemaProblem as exc:
        add("input_schema", str(exc))
    if output_schema is not None:
        try:
            check_object_schema(output_schema, label="outputSchema")
        except SchemaProblem as exc:
            add("output_schema", str(exc))
    try:
        check_icons(icons)
    except ValidationError as exc:
        add("icons", exc.messages[0])
    try:
        check_string_list(tags, what="Tags")
    except ValidationError as exc:
        add("tags", exc.messages[0])
    for message in backend_config_errors(backend_kind, backend_config, tenant_id=tenant_id):
        add("backend_config", message)
    return errors


def completion_errors(completions: Any, names: set[str], *, what: str) -> str:
    """A problem with a completions map ({name: [values]}), or ""."""
    if not isinstance(completions, dict):
        return 'Completions are a JSON object like {"name": ["value", …]}.'
    for name, values in completions.items():
        if name not in names:
            return f"Completions name {name!r}, which is no {what} here."
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            return f"Completions of {name!r} must be a list of strings."
    return ""


ARGUMENT_KEYS = {"name", "title", "description", "required"}


def argument_errors(arguments: Any) -> str:
    """A problem with a prompt's argument list, or ""."""
    if not isinstance(arguments, list):
        return 'Arguments are a JSON list like [{"name": "topic", "required": true}].'
    seen: set[str] = set()
    for number, argument in enumerate(arguments, start=1):
        if not isinstance(argument, dict) or not isinstance(argument.get("name"), str) or not argument["name"]:
            return f"Argument #{number} needs a 'name'."
        if set(argument) - ARGUMENT_KEYS:
            return f"Argument {argument['name']!r}: unknown keys {sorted(set(argument) - ARGUMENT_KEYS)}."
        if not isinstance(argument.get("required", False), bool):
            return f"Argument {argument['name']!r}: 'required' is true or false."
        if any(not isinstance(argument.get(key, ""), str) for key in ("title", "description")):
            return f"Argument {argument['name']!r}: 'title' and 'description' are text."
        if argument["name"] in seen:
            return f"The argument {argument['name']!r} appears twice."
        seen.add(argument["name"])
    return ""


# A worker holds the broker message of a call it runs unacknowledged until the call ended: its
# timeout, the cancel grace (MCP_CANCEL_GRACE_SECONDS) and the recovery's slack
# (tools_app.runs.recovery, 5 s; a minute here, for a loaded worker) must fit in Celery's
# visibility timeout, or the broker hands the still-running call to another worker as well.
WORKER_SLACK_SECONDS = 60.0


def visibility_timeout() -> int:
    options: dict[str, Any] = settings.CELERY_BROKER_TRANSPORT_OPTIONS  # CELERY_VISIBILITY_TIMEOUT
    return int(options["visibility_timeout"])


def longest_worker_timeout() -> float:
    """The longest timeout a tool that can run on a worker may have with these settings."""
    return visibility_timeout() - settings.MCP_CANCEL_GRACE_SECONDS - WORKER_SLACK_SECONDS


def runs_on_workers(*, execution_mode: str, task_support: str) -> bool:
    """Background tools run on workers, and so does every task (tools with task support)."""
    return execution_mode == "background" or task_support != "forbidden"


def worker_timeout_error(*, name: str, timeout_seconds: Any, execution_mode: str, task_support: str) -> str:
    """Why this timeout cannot work on the workers, naming the setting to raise; "" when it can."""
    if not isinstance(timeout_seconds, int | float) or not runs_on_workers(
        execution_mode=execution_mode, task_support=task_support
    ):
        return ""
    if timeout_seconds <= longest_worker_timeout():
        return ""
    needed = timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + WORKER_SLACK_SECONDS
    return (
        f"{name!r} runs on Celery workers (background, or with task support) with a timeout of "
        f"{timeout_seconds:g} s, but a worker's call is handed to another worker after "
        f"CELERY_VISIBILITY_TIMEOUT={visibility_timeout()} s: at most {longest_worker_timeout():g} s fits. "
        f"Lower the timeout, or set CELERY_VISIBILITY_TIMEOUT to at least {needed:g} on every process."
    )
