"""Log records that say which request, MCP session and call they belong to.

``LOG_FORMAT=json`` (settings) writes one JSON object per line; the default ``plain`` keeps
the classic text line. Either way ``LogContextFilter`` puts ``request_id``, ``session_id``
and ``call_id`` on every record from context variables, and with tracing on the current
span's ``trace_id`` and ``span_id``:

- Django requests (admin, API, console): ``RequestIdMiddleware`` takes ``X-Request-ID``
  from the reverse proxy, or makes one, and echoes it in the response.
- MCP requests: the consumer sets the request id and the ``Mcp-Session-Id``.
- Celery workers: the task id, and for a background call the run id as ``call_id``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from mcp_platform import tracing


class LazyRequestId:
    """A request id made only if something is logged: most MCP requests log nothing."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = ""

    def __str__(self) -> str:
        if not self._value:
            self._value = secrets.token_hex(8)
        return self._value

    def __bool__(self) -> bool:
        return True


request_id_var: contextvars.ContextVar[str | LazyRequestId] = contextvars.ContextVar("toolbay_request_id", default="")
session_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("toolbay_session_id", default="")
call_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("toolbay_call_id", default="")

# A proxy's request id is echoed back and logged, so only a short, plain token is taken.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Celery tasks whose first argument is the background run (the call) they execute.
_RUN_TASKS = frozenset({"tools_app.tasks.execute_run"})
# Attributes every LogRecord has; anything else was passed with extra= and is logged too.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_CONTEXT = ("request_id", "session_id", "call_id", "trace_id", "span_id")


def new_request_id(offered: str | bytes | None = None) -> str:
    if isinstance(offered, bytes):
        offered = offered.decode("latin-1")
    if offered and _REQUEST_ID.match(offered):
        return offered
    return secrets.token_hex(8)


@contextlib.contextmanager
def log_context(*, request_id: str = "", session_id: str = "", call_id: str = "") -> Iterator[None]:
    pairs: tuple[tuple[contextvars.ContextVar[Any], str], ...] = (
        (request_id_var, request_id),
        (session_id_var, session_id),
        (call_id_var, call_id),
    )
    tokens = [(var, var.set(value)) for var, value in pairs if value]
    try:
        yield
    finally:
        leave_log_context(tokens)


def _celery_ids() -> tuple[str, str]:
    """(task id, run id) of the Celery task running in this thread, if any."""
    try:
        from celery import current_task
    except ImportError:  # pragma: no cover - celery is a runtime dependency
        return "", ""
    task = current_task
    request = getattr(task, "request", None) if task else None
    task_id = getattr(request, "id", None) or ""
    if not task_id:
        return "", ""
    args = getattr(request, "args", None) or ()
    run_id = str(args[0]) if task.name in _RUN_TASKS and args else ""
    return str(task_id), run_id


class LogContextFilter(logging.Filter):
    """Adds request_id, session_id and call_id (empty when unknown) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Locals because LogRecord declares no such attributes (mypy would reject reading them).
        # django.request logs 4xx/5xx after the middleware returned, with the request attached.
        request_id = str(
            getattr(record, "request_id", "")
            or request_id_var.get()
            or getattr(getattr(record, "request", None), "request_id", "")
        )
        call_id = getattr(record, "call_id", "") or call_id_var.get()
        record.request_id = request_id
        record.session_id = getattr(record, "session_id", "") or session_id_var.get()
        record.call_id = call_id
        if not request_id and not call_id:
            task_id, run_id = _celery_ids()
            record.task_id, record.call_id = task_id, run_id
        if tracing.ENABLED:  # the current span's ids: logs join traces (and invocation rows)
            record.trace_id, record.span_id = tracing.current_ids()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context ids, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT:
            value = getattr(record, name, "")
            if value:
                entry[name] = value
        for name, value in record.__dict__.items():
            if name not in _STANDARD and name not in entry and not name.startswith("_"):
                entry[name] = value if _plain(value) else repr(value)
        entry = {key: value for key, value in entry.items() if value != ""}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def enter_mcp_log_context(scope: dict[str, Any]) -> list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]]:
    """Set the log context of one MCP request (ASGI scope): its request id (the proxy's, or
    one made when first logged) and session id. Returns what ``leave_log_context`` undoes.

    Plain sets and resets rather than a context manager: this runs for every MCP request.
    """
    offered: bytes | None = None
    session_id = ""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            offered = value
        elif name == b"mcp-session-id":
            session_id = value.decode("latin-1")[:128]
    request_id: str | LazyRequestId = new_request_id(offered) if offered else LazyRequestId()
    tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] = [
        (request_id_var, request_id_var.set(request_id))
    ]
    if session_id:
        tokens.append((session_id_var, session_id_var.set(session_id)))
    return tokens


def leave_log_context(tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]]) -> None:
    for var, token in reversed(tokens):
        var.reset(token)


class RequestIdMiddleware:
    """Gives each Django request an id (X-Request-ID in, or a new one), logged and echoed."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        request_id = new_request_id(request.headers.get("X-Request-ID"))
        request.request_id = request_id
        with log_context(request_id=request_id):
            response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response
