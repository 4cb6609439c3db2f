"""OpenTelemetry tracing, configured only by the standard ``OTEL_*`` variables; off when unset.

On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``), or when it is
unset and an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``) is;
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off. The SDK itself
reads the rest: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``
(+ ``_ARG``), the OTLP endpoint, headers and timeout, ``OTEL_BSP_*``. Only OTLP over
HTTP/protobuf is exported (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``, the default);
another protocol refuses to start rather than silently dropping every span.

``ENABLED`` is decided once, at import, from the environment. Every helper here checks it
first and, when off, returns a shared no-op without creating span objects or touching the
OpenTelemetry context: the MCP hot path pays one attribute read per hook.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

_EXPORTERS = frozenset({"otlp", "console", "none"})
_PROTOCOLS = frozenset({"http/protobuf"})


__all__ = [
    "ENABLED",
    "Link",
    "RequestScope",
    "RequestSpan",
    "Span",
    "SpanKind",
    "TracingConfigError",
    "annotate",
    "authenticated",
    "configure",
    "consumer_span",
    "current_ids",
    "current_trace_id",
    "enter_request",
    "exporters_from_env",
    "extract",
    "flush",
    "inject",
    "leave_request",
    "link_to",
    "mark_error",
    "request_parent",
    "resume_span",
    "span",
    "start_request",
    "stream_key",
    "stream_record",
    "traceparent",
]


class TracingConfigError(ValueError):
    """An ``OTEL_*`` variable asks for something this process cannot do."""


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def exporters_from_env() -> tuple[str, ...]:
    """The span exporters the environment asks for (empty: tracing off)."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return ()
    named = _env("OTEL_TRACES_EXPORTER")
    if not named:
        endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ("otlp",) if endpoint else ()
    chosen = tuple(dict.fromkeys(part.strip().lower() for part in named.split(",") if part.strip()))
    unknown = [name for name in chosen if name not in _EXPORTERS]
    if unknown:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER: unsupported exporter {unknown[0]!r} (otlp, console, none)")
    if "otlp" in chosen:
        protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
        if protocol not in _PROTOCOLS:
            raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported (http/protobuf)")
    return tuple(name for name in chosen if name != "none")


# Decided once per process: every hook below reads this and nothing else when tracing is off.
ENABLED: bool = bool(exporters_from_env())
_tracer = trace.get_tracer("toolbay")
_configured = False
_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def configure() -> None:
    """Install the tracer provider and its exporters (once per process; nothing when off).

    The batch processor exports from a thread and re-creates it after a fork (Celery's
    prefork pool), so configuring before the pool forks is safe."""
    global _configured
    if not ENABLED or _configured:
        return
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create()
    if not _env("OTEL_SERVICE_NAME") and "service.name=" not in _env("OTEL_RESOURCE_ATTRIBUTES"):
        resource = resource.merge(Resource.create({SERVICE_NAME: "toolbay"}))
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER(_ARG)
    for name in exporters_from_env():
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _configured = True


def flush(timeout_millis: int = 5000) -> None:
    """Export what is buffered (a process about to exit, a test waiting for its spans)."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if ENABLED and force_flush is not None:
        force_flush(timeout_millis)


# --- spans -----------------------------------------------------------------------------


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    links: list[Link] | None = None,
    parent: otel_context.Context | None = None,
) -> contextlib.AbstractContextManager[Span | None]:
    """A span current for the block (None when tracing is off: nothing is created).

    Nothing either under a span the sampler dropped: its children would be dropped too, and
    the dropped span's context (sampled=0) is what ``inject`` passes on."""
    if not ENABLED or (parent is None and _sampled_out()):
        return _OFF
    return _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes, links=links)


def _sampled_out() -> bool:
    current = trace.get_current_span()
    return current.get_span_context().is_valid and not current.is_recording()


def mark_error(span: Span | None, message: str) -> None:
    if span is not None:
        span.set_status(Status(StatusCode.ERROR, message))


def annotate(**attributes: Any) -> None:
    """Attributes on the current span (the request's, or a child's); nothing when off.
    A keyword ``a__b`` names the attribute ``a.b`` (``toolbay__outcome``: ``toolbay.outcome``)."""
    if ENABLED:
        current = trace.get_current_span()
        if current.is_recording():
            current.set_attributes({key.replace("__", "."): value for key, value in attributes.items()})


def inject(carrier: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Put the current trace context (``traceparent``, ``tracestate``) into ``carrier``."""
    if ENABLED:
        propagate.inject(carrier)
    return carrier


def extract(carrier: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The trace context a carrier (headers, ``_meta``) names; None when it names none."""
    if not ENABLED or not carrier or not isinstance(carrier.get("traceparent"), str):
        return None
    extracted = propagate.extract(carrier)
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def link_to(carrier: Mapping[str, Any] | None) -> list[Link] | None:
    """A link to the span a carrier names (a resumed stream to the call it resumes)."""
    extracted = extract(carrier)
    return [Link(trace.get_current_span(extracted).get_span_context())] if extracted is not None else None


def current_ids() -> tuple[str, str]:
    """(trace id, span id) of the current span in hex; empty strings when there is none."""
    if not ENABLED:
        return "", ""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return "", ""
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def current_trace_id() -> str:
    return current_ids()[0]


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` ("" when there is none)."""
    return str(inject({}).get("traceparent", ""))


# --- an MCP request ----------------------------------------------------------------------


@dataclass
class RequestScope:
    """What the endpoint knows of one HTTP request before the engine parses it: the trace
    context its headers carry, its session and endpoint, and how authentication went (the
    engine authenticates before it knows which request span to put it under)."""

    parent: otel_context.Context | None
    endpoint: str
    session_id: str
    token: contextvars.Token[RequestScope | None] | None = None
    auth: list[tuple[int, int]] = field(default_factory=list)  # (start, end) in ns since the epoch


_request_scope: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar(
    "toolbay_trace_request", default=None
)


def enter_request(scope: Mapping[str, Any], endpoint: str) -> RequestScope:
    """Called by the endpoint for each HTTP request when tracing is on: a client's
    ``traceparent`` header becomes the parent of the request's spans."""
    headers: dict[str, str] = {}
    session_id = ""
    for name, value in scope.get("headers", ()):
        if name in (b"traceparent", b"tracestate"):
            headers[name.decode()] = value.decode("latin-1")
        elif name == b"mcp-session-id":
            session_id = value.decode("latin-1")[:128]
    request = RequestScope(extract(headers), endpoint, session_id)
    request.token = _request_scope.set(request)
    return request


def leave_request(request: RequestScope) -> None:
    if request.token is not None:
        _request_scope.reset(request.token)


def request_parent() -> otel_context.Context | None:
    """The trace context the current HTTP request's headers carry."""
    request = _request_scope.get()
    return request.parent if request is not None else None


def authenticated(started_ns: int) -> None:
    """Authentication of the current HTTP request took from ``started_ns`` until now;
    becomes the first request span's ``mcp.authenticate`` child."""
    request = _request_scope.get()
    if request is not None:
        request.auth.append((started_ns, time.time_ns()))


class RequestSpan:
    """The server span of one JSON-RPC request, current while the engine handles it."""

    __slots__ = ("_token", "span")

    def __init__(self, span: Span, token: object) -> None:
        self.span = span
        self._token = token

    def failed(self, code: int, message: str) -> None:
        self.span.set_attribute("rpc.response.status_code", str(code))
        self.span.set_attribute("error.type", str(code))
        self.span.set_status(Status(StatusCode.ERROR, message))

    def end(self) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]
        self.span.end()


# Where the name of the span says what the request is about (MCP semantic conventions).
_TARGETS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri", "resources/subscribe": "uri"}


def start_request(method: str, params: Mapping[str, Any], request_id: Any, protocol_version: str) -> RequestSpan:
    """The engine's hook (``mcp_platform.mcp.spine``): a SERVER span for one request, a child
    of ``params._meta.traceparent`` when the client sent one, else of the HTTP request's
    ``traceparent`` header."""
    request = _request_scope.get()
    meta = params.get("_meta")
    parent = extract(meta) if isinstance(meta, Mapping) else None
    if parent is None and request is not None:
        parent = request.parent
    target_key = _TARGETS.get(method)
    target = params.get(target_key) if target_key else None
    attributes: dict[str, Any] = {
        "mcp.method.name": method,
        "rpc.system": "jsonrpc",
        "rpc.method": method,
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    if request_id is not None:
        attributes["jsonrpc.request.id"] = str(request_id)
    if protocol_version:
        attributes["mcp.protocol.version"] = protocol_version
    if isinstance(target, str):
        if method == "tools/call":
            attributes["gen_ai.tool.name"] = target
            attributes["gen_ai.operation.name"] = "execute_tool"
        elif method == "prompts/get":
            attributes["gen_ai.prompt.name"] = target
        else:
            attributes["mcp.resource.uri"] = target
    started = time.time_ns()
    auth: tuple[int, int] | None = None
    if request is not None:
        attributes["toolbay.endpoint"] = request.endpoint
        if request.session_id:
            attributes["mcp.session.id"] = request.session_id
        if request.auth:
            auth = request.auth.pop()
            started = auth[0]
    name = f"{method} {target}" if isinstance(target, str) else method
    server = _tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes, start_time=started)
    if auth is not None:
        child = _tracer.start_span("mcp.authenticate", context=trace.set_span_in_context(server), start_time=auth[0])
        child.end(end_time=auth[1])
    token = otel_context.attach(trace.set_span_in_context(server, parent))
    return RequestSpan(server, token)


# --- resumption ----------------------------------------------------------------------------


def stream_key(session_id: str, stream_id: str) -> str:
    """Where the trace context of the call a stream carries is kept, for a resumption of that
    stream (on any process) to link to."""
    return f"toolbay:trace:{session_id}:{stream_id}"


def stream_record(session_id: str, stream_id: str, ttl_seconds: int) -> tuple[object, ...] | None:
    """The Redis command that keeps the current span as the stream's call (``stream_key``);
    None when that span was sampled out (nothing to link to)."""
    if not trace.get_current_span().is_recording():
        return None
    return ("SET", stream_key(session_id, stream_id), traceparent(), "EX", ttl_seconds)


def resume_span(request: RequestScope, origin: bytes | str | None) -> contextlib.AbstractContextManager[Span | None]:
    """The SERVER span of a GET that resumes a stream (Last-Event-ID), linked to the span of
    the call that stream carries (``origin``: its traceparent, None when unknown)."""
    if isinstance(origin, bytes):
        origin = origin.decode("latin-1")
    attributes = {"mcp.method.name": "resume", "toolbay.endpoint": request.endpoint}
    if request.session_id:
        attributes["mcp.session.id"] = request.session_id
    links = link_to({"traceparent": origin}) if origin else None
    return span("GET resume", kind=SpanKind.SERVER, parent=request.parent, links=links, attributes=attributes)


@contextlib.contextmanager
def consumer_span(name: str, headers: Mapping[str, Any] | None, **attributes: Any) -> Iterator[Span | None]:
    """A CONSUMER span for a message (a Celery task) whose producer put its trace context in
    the message headers: the child of that producer span."""
    if not ENABLED:
        yield None
        return
    with _tracer.start_as_current_span(
        name,
        context=extract(headers),
        kind=SpanKind.CONSUMER,
        attributes={key.replace("__", "."): value for key, value in attributes.items()},
    ) as current:
        yield current
