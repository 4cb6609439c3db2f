"""OpenTelemetry traces end to end: two live ASGI processes and a Celery worker export to a
real OTLP/HTTP receiver (protobuf decoded with ``opentelemetry-proto``); each call, driven
by the official SDK client, arrives as one trace whose spans link across the processes, the
HTTP API and the upstream MCP server see the traceparent of their parent span, and the
invocation row and the JSON log lines carry the same trace id."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context
from mcp_types import ElicitResult
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from audit.models import Invocation
from tenants.models import Tenant
from tests.backends.upstream_server import HARMLESS, SdkUpstream
from tests.mcp.live import LiveServer, LiveWorker, kill_workers, start_server, start_worker, stop_together
from tests.mcp.wire import McpSession, rpc
from tests.poll import wait_for
from tools_app.backends.upstream.federation import upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import secret_set
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

TENANT = "live-alpha"
UPSTREAM_TOKEN = "tracing-upstream-token-51f0"
SERVER = 2  # OTLP span kinds
CLIENT = 3
PRODUCER = 4
CONSUMER = 5


@dataclass
class ReceivedSpan:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver on loopback: what the processes exported, decoded."""

    server: ThreadingHTTPServer
    spans: list[ReceivedSpan] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in list(self.spans) if span.trace_id == trace_id]

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        )
                    )


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@dataclass
class Api:
    """A loopback HTTP API that records the traceparent of every request."""

    server: ThreadingHTTPServer
    traceparents: list[str] = field(default_factory=list)

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_receiver() -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/traces":
                receiver.receive(body)
                answer, status = ExportTraceServiceResponse().SerializeToString(), 200
            else:
                answer, status = b"", 404
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    receiver = Receiver(_serve(Handler))
    return receiver


def start_api() -> Api:
    api: Api

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            api.traceparents.append(self.headers.get("traceparent", ""))
            body = json.dumps({"weather": "sunny"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    api = Api(_serve(Handler))
    return api


@dataclass
class World:
    receiver: Receiver
    api: Api
    upstream: SdkUpstream
    upstream_meta: list[dict[str, Any]]
    servers: list[LiveServer]
    worker: LiveWorker
    key: str


@pytest.fixture(scope="module")
def world(
    live_world: Any, live_audit_writer: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    receiver, api = start_receiver(), start_api()
    upstream = SdkUpstream(UPSTREAM_TOKEN)
    upstream_meta: list[dict[str, Any]] = []

    @upstream.mcp.tool(description="Says which trace context its request carried.", annotations=HARMLESS)
    def traced(ctx: Context) -> str:
        upstream_meta.append(dict(ctx.request_context.meta or {}))
        return "traced"

    upstream.start()
    allowed = f"{api.host_port},{upstream.host_port}"
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=TENANT)
        tool = Tool(
            name="tracing_weather",
            description="The weather, from a loopback API (tracing test).",
            input_schema={"type": "object"},
            backend_kind="http",
            backend_config={"url": f"http://{api.host_port}/weather"},
            execution_mode="background",
            confirmation="none",
            tags=["tracing"],
        )
        tool.full_clean()
        tool.save()
        confirmed = Tool(
            name="tracing_confirmed",
            description="Runs once the user says yes (tracing test).",
            input_schema={"type": "object"},
            backend_config={"handler": "demo.echo"},
            confirmation="always",
            tags=["tracing"],
        )
        confirmed.full_clean()
        confirmed.save()
        secret = secret_set(tenant=tenant, name="tracing-upstream-token", value=UPSTREAM_TOKEN)
        registered = UpstreamServer(
            tenant=tenant,
            name="tracing",
            url=upstream.url,
            auth="bearer",
            secret=secret,
            tool_prefix="tr.",
            tags=["tracing"],
            publish_new_tools=True,
        )
        registered.full_clean()
        registered.save()
        with override_settings(TOOLBAY_OUTBOUND_ALLOWED_HOSTS=allowed.split(",")):
            upstream_refresh(upstream_id=registered.pk)
        access_rule_grant_pattern(tenant=tenant, pattern="tag:tracing")
    tmp = tmp_path_factory.mktemp("tracing")
    traced_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": allowed,
        # Its own queues: the session's untraced workers must not take these calls.
        "CELERY_BROKER_KEY_PREFIX": f"tracing-{secrets.token_hex(4)}:",
    }
    servers = [
        start_server(tmp, "traced-a", {**traced_env, "OTEL_SERVICE_NAME": "toolbay-web-a"}),
        start_server(tmp, "traced-b", {**traced_env, "OTEL_SERVICE_NAME": "toolbay-web-b"}),
    ]
    worker = start_worker(
        tmp, "traced-worker", "toolbay.short,toolbay.long", {**traced_env, "OTEL_SERVICE_NAME": "toolbay-worker"}
    )
    yield World(receiver, api, upstream, upstream_meta, servers, worker, live_world.keys["alpha"])
    kill_workers([worker])
    stop_together([server.process for server in servers], grace=15)
    upstream.stop()
    receiver.server.shutdown()
    api.server.shutdown()
    with django_db_blocker.unblock():
        AccessRule.objects.filter(tenant__slug=TENANT, tool_pattern="tag:tracing").delete()
        Tool.objects.filter(tags__contains=["tracing"]).delete()
        registered.delete()


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def _call(
    world: World,
    server: LiveServer,
    name: str,
    arguments: dict[str, Any],
    *,
    header: str = "",
    meta: dict[str, Any] | None = None,
    progress: list[float] | None = None,
    **options: Any,
) -> Any:
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append(value)

    async def scenario() -> Any:
        headers = {"Authorization": f"Bearer {world.key}", **({"traceparent": header} if header else {})}
        http = httpx2.AsyncClient(headers=headers, timeout=60)
        transport = streamable_http_client(server.endpoint(TENANT), http_client=http)
        async with Client(transport, **{"mode": "legacy", **options}) as c:
            return await c.call_tool(name, arguments, progress_callback=on_progress, meta=meta)

    return asyncio.run(scenario())


def _spans(world: World, trace_id: str, *names: str) -> dict[str, ReceivedSpan]:
    """The trace's spans by name, once every span named has arrived."""

    def arrived() -> dict[str, ReceivedSpan] | None:
        spans = {span.name: span for span in world.receiver.trace(trace_id)}
        return spans if set(names) <= set(spans) else None

    return wait_for(
        arrived,
        timeout=30,
        message=lambda: (
            f"spans {names} of trace {trace_id}; got {[(s.service, s.name) for s in world.receiver.trace(trace_id)]}"
        ),
    )


def _row(trace_id: str, tool_name: str) -> Invocation:
    return wait_for(
        lambda: Invocation.objects.filter(tool_name=tool_name, trace_id=trace_id).first(),
        timeout=30,
        message=f"the invocation row of {tool_name} with trace {trace_id}",
    )


def _log_lines(path: Path, trace_id: str) -> list[dict[str, Any]]:
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("trace_id") == trace_id:
                lines.append(entry)
    return lines


def test_inline_call_is_a_child_of_the_clients_traceparent_header(world, orm):
    header, trace_id, client_span = _traceparent()
    result = _call(world, world.servers[0], "echo", {"text": "traced"}, header=header)
    assert result.content[0].text == "traced"
    spans = _spans(
        world,
        trace_id,
        "tools/call echo",
        "mcp.authenticate",
        "toolbay.validate_arguments",
        "toolbay.backend python",
        "toolbay.audit.write",
    )
    root = spans["tools/call echo"]
    assert (root.kind, root.parent_id, root.service) == (SERVER, client_span, "toolbay-web-a")
    assert root.attributes["mcp.method.name"] == "tools/call"
    assert root.attributes["gen_ai.tool.name"] == "echo"
    assert root.attributes["mcp.protocol.version"] and root.attributes["mcp.session.id"]
    assert root.attributes["toolbay.endpoint"] == TENANT
    assert root.attributes["toolbay.outcome"] == "completed"
    children = {(span.name, span.parent_id) for span in world.receiver.trace(trace_id)}
    for child in ("mcp.authenticate", "toolbay.validate_arguments", "toolbay.backend python", "toolbay.audit.write"):
        assert (child, root.span_id) in children
    row = _row(trace_id, "echo")
    assert row.session_id == root.attributes["mcp.session.id"]


def test_the_confirmation_span_lasts_the_wait_for_the_users_answer(world, orm):
    header, trace_id, _ = _traceparent()

    async def approve(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"decision": "approve"})

    result = _call(
        world, world.servers[0], "tracing_confirmed", {"text": "yes"}, header=header, elicitation_callback=approve
    )
    assert result.content[0].text == "yes"
    spans = _spans(world, trace_id, "tools/call tracing_confirmed", "toolbay.confirmation", "toolbay.backend python")
    root, confirmation = spans["tools/call tracing_confirmed"], spans["toolbay.confirmation"]
    assert confirmation.parent_id == root.span_id
    assert confirmation.attributes == {"toolbay.confirmation.asker": "user", "toolbay.confirmation.outcome": "granted"}
    assert _row(trace_id, "tracing_confirmed").confirmation == "granted"


def test_an_inline_failure_logs_with_the_trace_id_of_its_row(world, orm):
    header, trace_id, _ = _traceparent()
    result = _call(world, world.servers[0], "inline_crash", {}, header=header)
    assert result.is_error
    spans = _spans(world, trace_id, "tools/call inline_crash", "toolbay.backend python")
    assert spans["tools/call inline_crash"].attributes["toolbay.outcome"] == "failed"
    row = _row(trace_id, "inline_crash")
    logged = wait_for(lambda: _log_lines(world.servers[0].log_path, trace_id), message="the failure's log line")
    assert logged[0]["level"] == "ERROR" and "inline_crash" in logged[0]["message"]
    # Logged once the backend span had ended with the exception: under the request's span.
    assert logged[0]["span_id"] == spans["tools/call inline_crash"].span_id
    assert row.trace_id == trace_id


def test_background_call_with_progress_crosses_the_worker_in_one_trace(world, orm):
    """The client's trace context in ``params._meta`` (the MCP trace-context proposal)."""
    meta_parent, trace_id, client_span = _traceparent()
    progress: list[float] = []
    result = _call(
        world, world.servers[0], "slow_count", {"count": 3}, meta={"traceparent": meta_parent}, progress=progress
    )
    assert progress == [1, 2, 3] and "3" in result.content[0].text
    spans = _spans(
        world,
        trace_id,
        "tools/call slow_count",
        "toolbay.long publish",
        "toolbay.long process",
        "toolbay.backend python",
    )
    root, publish = spans["tools/call slow_count"], spans["toolbay.long publish"]
    consume, backend = spans["toolbay.long process"], spans["toolbay.backend python"]
    assert root.parent_id == client_span and root.service == "toolbay-web-a"
    assert (publish.kind, publish.parent_id, publish.service) == (PRODUCER, root.span_id, "toolbay-web-a")
    assert (consume.kind, consume.parent_id, consume.service) == (CONSUMER, publish.span_id, "toolbay-worker")
    assert (backend.parent_id, backend.service) == (consume.span_id, "toolbay-worker")
    row = _row(trace_id, "slow_count")
    assert row.run_id
    logged = wait_for(lambda: _log_lines(world.worker.log_path, trace_id), message="the worker's log line")
    assert any(row.run_id in line["message"] for line in logged)


def test_http_backend_sees_the_traceparent_of_its_client_span(world, orm):
    header, trace_id, client_span = _traceparent()
    result = _call(world, world.servers[1], "tracing_weather", {}, header=header)
    assert "sunny" in result.content[0].text
    spans = _spans(world, trace_id, "tools/call tracing_weather", "toolbay.short process", "GET")
    root, consume, get = spans["tools/call tracing_weather"], spans["toolbay.short process"], spans["GET"]
    assert root.parent_id == client_span and root.service == "toolbay-web-b"
    assert consume.service == "toolbay-worker"
    assert (get.kind, get.service) == (CLIENT, "toolbay-worker")
    assert get.parent_id == spans["toolbay.backend http"].span_id
    assert spans["toolbay.backend http"].parent_id == consume.span_id
    assert get.attributes["http.response.status_code"] == 200
    assert f"00-{trace_id}-{get.span_id}-01" in world.api.traceparents
    row = _row(trace_id, "tracing_weather")
    assert row.outcome == "completed"
    logged = wait_for(lambda: _log_lines(world.worker.log_path, trace_id), message="the worker's log line")
    assert any(row.run_id in line["message"] and line["span_id"] == consume.span_id for line in logged)


def test_upstream_mcp_server_gets_the_trace_context_in_meta(world, orm):
    header, trace_id, client_span = _traceparent()
    result = _call(world, world.servers[1], "tr.traced", {}, header=header)
    assert result.content[0].text == "traced"
    spans = _spans(world, trace_id, "tools/call tr.traced", "tools/call traced", "toolbay.backend upstream_mcp")
    root, outbound = spans["tools/call tr.traced"], spans["tools/call traced"]
    assert root.parent_id == client_span and root.service == "toolbay-web-b"
    assert outbound.kind == CLIENT and outbound.parent_id == spans["toolbay.backend upstream_mcp"].span_id
    assert {"traceparent": f"00-{trace_id}-{outbound.span_id}-01"}.items() <= world.upstream_meta[-1].items()
    assert _row(trace_id, "tr.traced").outcome == "completed"


def test_a_call_without_trace_context_starts_its_own_trace(world, orm):
    result = _call(world, world.servers[1], "echo", {"text": "no parent"})
    assert result.content[0].text == "no parent"

    def root() -> ReceivedSpan | None:
        return next(
            (s for s in list(world.receiver.spans) if s.name == "tools/call echo" and s.service == "toolbay-web-b"),
            None,
        )

    span = wait_for(root, timeout=30, message="the server span of the untraced call")
    assert span.parent_id == ""
    assert _row(span.trace_id, "echo").trace_id == span.trace_id


def test_a_stream_resumed_on_the_other_process_links_to_the_call(world, orm):
    """Raw HTTP: the client drops the call's stream on purpose and resumes it elsewhere."""
    header, trace_id, client_span = _traceparent()
    with httpx.Client(timeout=60) as http:
        session = McpSession.open(http, world.servers[0].endpoint(TENANT), world.key)
        call = rpc("tools/call", {"name": "countdown", "arguments": {"n": 6}, "_meta": {"progressToken": "p"}}, id=7)
        with http.stream("POST", session.endpoint, json=call, headers=session.headers(traceparent=header)) as stream:
            last_id = ""
            for line in stream.iter_lines():
                if line.startswith("id:") and line.partition(":")[2].strip():
                    last_id = line.partition(":")[2].strip()
                if line.startswith("data:") and '"progress"' in line:
                    break  # the client "drops" after the first progress event
        resumed_header, resumed_trace, _ = _traceparent()
        resumed = http.get(
            world.servers[1].endpoint(TENANT),
            headers=session.headers(
                Accept="text/event-stream", **{"Last-Event-ID": last_id, "traceparent": resumed_header}
            ),
        )
    assert resumed.status_code == 200 and "Countdown from 6 finished." in resumed.text
    call_span = _spans(world, trace_id, "tools/call countdown")["tools/call countdown"]
    assert call_span.parent_id == client_span and call_span.service == "toolbay-web-a"
    resume = _spans(world, resumed_trace, "GET resume")["GET resume"]
    assert resume.service == "toolbay-web-b" and resume.kind == SERVER
    assert resume.links == [(trace_id, call_span.span_id)]


def test_a_2026_07_28_request_is_traced_the_same_way(world, orm):
    header, trace_id, client_span = _traceparent()
    result = _call(world, world.servers[1], "echo", {"text": "modern"}, header=header, mode="auto")
    assert result.content[0].text == "modern"
    spans = _spans(world, trace_id, "tools/call echo", "toolbay.backend python")
    root = spans["tools/call echo"]
    assert root.parent_id == client_span and root.attributes["mcp.protocol.version"] == "2026-07-28"
    assert "mcp.session.id" not in root.attributes  # this revision has no sessions
    assert _row(trace_id, "echo").protocol_version == "2026-07-28"
