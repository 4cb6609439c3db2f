"""Streamable HTTP (MCP 2025-11-25 and the earlier handshake revisions) over raw ASGI.

One instance serves every request of a process. Checks run in the order the TypeScript
SDK uses (which the conformance suite expects): Host/Origin, credential, HTTP method,
Accept, Content-Type, size, JSON, JSON-RPC shape, era, session, protocol-version header,
then dispatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.calls import Relayed
from mcp_platform.mcp.detached import detach
from mcp_platform.mcp.engine import Engine
from mcp_platform.mcp.events import EventStore, parse_event_id
from mcp_platform.mcp.host import AuthError, Identity
from mcp_platform.mcp.jsonrpc import INVALID_REQUEST, SERVER_ERROR, SESSION_NOT_FOUND, JsonRpcError, Message
from mcp_platform.mcp.limits import InFlight, InputLimits
from mcp_platform.mcp.liveness import Liveness, ProducerWatch
from mcp_platform.mcp.sessions import Session, SessionLookup
from mcp_platform.mcp.stateless import StatelessEngine
from mcp_platform.mcp.transport import checks, sse
from mcp_platform.mcp.transport.drain import Drain
from mcp_platform.mcp.transport.hub import StreamHub
from mcp_platform.mcp.transport.listen import ListenStream
from mcp_platform.mcp.transport.post_stream import PostStream, StreamOptions
from mcp_platform.mcp.transport.responder import Receive, RequestFailed, Responder, Scope, Send, watch_disconnect
from mcp_platform.mcp.transport.standalone import (
    StandaloneStream,
    StreamServices,
    catalog_round,
    resource_round,
)
from mcp_platform.mcp.transport.stateless_http import StatelessHttp
from mcp_platform.mcp.versions import SUPPORTED, allows_batches, is_modern

log = logging.getLogger(__name__)


SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"


@dataclass(frozen=True)
class TransportConfig:
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    trust_forwarded_host: bool
    max_body_bytes: int
    keepalive_seconds: float
    limits: InputLimits
    # Whether an exception means Redis or the database did not answer (503, not a bug).
    is_unavailable: Callable[[BaseException], bool]
    # The Retry-After of a 503 (seconds).
    retry_after_seconds: int
    # The request's context for the platform's logs: entered (given the ASGI scope) before
    # the request is answered, and left (given what entering returned) once it is.
    enter_context: Callable[[Scope], Any] = lambda scope: None
    leave_context: Callable[[Any], None] = lambda entered: None


class HttpProblem(Exception):
    """Answer the HTTP request with this status and a JSON-RPC error body."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = JsonRpcError(code, message, data=data)
        self.headers = headers or []


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _challenge(exc: AuthError) -> bytes:
    """``WWW-Authenticate`` for a 401 or 403 (MCP authorization; RFC 6750 §3, RFC 9728 §5.1)."""
    if exc.error == "insufficient_scope":
        order = [("error", exc.error), ("scope", exc.scope), ("resource_metadata", exc.resource_metadata)]
    else:
        order = [("resource_metadata", exc.resource_metadata), ("scope", exc.scope), ("error", exc.error)]
    order.append(("error_description", exc.error_description))
    params = ", ".join(f"{name}={_quoted(value)}" for name, value in order if value)
    return f"Bearer {params}".rstrip().encode("latin-1", "replace")


def _auth_problem(exc: AuthError) -> HttpProblem:
    if exc.status in (401, 403):
        return HttpProblem(exc.status, SERVER_ERROR, exc.message, headers=[(b"www-authenticate", _challenge(exc))])
    return HttpProblem(exc.status, SERVER_ERROR, exc.message)


def _replaying(first: dict[str, Any], receive: Receive) -> Receive:
    """``receive`` that gives ``first`` (already received) once more before what follows."""
    pending: list[dict[str, Any]] = [first]

    async def again() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return again


async def _looks_like_a_call(responder: Responder) -> bool:
    """Whether the POST's body is one tools/call (not a task), judged from its bytes before
    the credential is checked. Only a body that came whole in its first part (a small one
    arrives with the headers) is looked at; that part is then received again by whoever
    reads the body. Asked only for a credential the host vouches for (a request without
    one is refused with its body unread) and never with ``Expect: 100-continue`` (such a
    client sends its body only when asked). A wrong guess costs only the head start: the
    host gives back what no call used."""
    first = await responder.receive()
    responder.receive = _replaying(first, responder.receive)
    if first["type"] != "http.request" or first.get("more_body"):
        return False
    body: bytes = first.get("body", b"")
    return b'"tools/call"' in body and b'"task"' not in body and body.lstrip()[:1] == b"{"


class StreamableHttp:
    def __init__(
        self,
        engine: Engine,
        stateless: StatelessEngine,
        events: EventStore,
        config: TransportConfig,
        liveness: Liveness,
    ) -> None:
        self.engine = engine
        self.watch = ProducerWatch(liveness, events, engine.host.recover_run)
        self.drain = Drain(events, held=self._held_streams)
        # One kind of answer stream for both revisions, with each revision's rules.
        self._streams = StreamOptions(
            events, self.watch, self.drain, config.keepalive_seconds, resumable=True, cancel_on_disconnect=False
        )
        self.stateless = StatelessHttp(
            stateless,
            dataclasses.replace(self._streams, resumable=False, cancel_on_disconnect=True),
            register_listener=self._register_listener,
            authorize=self._authorize,
        )
        self.events = events
        self.config = config
        self._services = StreamServices(
            host=engine.host,
            sessions=engine.sessions,
            events=events,
            keepalive_seconds=config.keepalive_seconds,
            drain=self.drain,
        )
        self._hub: StreamHub | None = None
        self._in_flight = InFlight(config.limits.session_max_in_flight)

    def _held_streams(self) -> list[tuple[Responder, StandaloneStream]]:
        """The standalone streams a drain ends: the hub holds them (see ``StandaloneStream._join``)."""
        hub = self._hub
        if hub is None:
            return []
        return [(s.responder, s) for s in hub.streams() if isinstance(s, StandaloneStream) and s.drainable]

    async def _register_listener(self, stream: ListenStream) -> Callable[[], Awaitable[None]]:
        hub = self.hub()
        await hub.register(stream)
        return functools.partial(hub.unregister, stream)

    def hub(self) -> StreamHub:
        if self._hub is None:
            self._hub = StreamHub(
                self.engine.layer,  # type: ignore[arg-type]
                functools.partial(catalog_round, self._services),
                functools.partial(resource_round, self._services),
                keepalive_seconds=self.config.keepalive_seconds,
            )
        return self._hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send, *, endpoint: str) -> None:
        entered = self.config.enter_context(scope)
        responder = Responder(receive, send)
        try:
            stream = await self._answer(scope, responder, endpoint)
            if stream is not None:
                # A GET stream stays open for hours: it runs here, where the request's headers,
                # its session as read and the checks' locals are gone with _answer's frame.
                await stream.run()
        except HttpProblem as problem:
            if not responder.started:
                await responder.json(problem.status, jsonrpc.error(None, problem.error), problem.headers)
        except RequestFailed as failed:
            await self._fault(failed.__cause__ or failed, responder, failed.request_id)
        except Exception as exc:  # every request gets an answer, never the ASGI server's bare 500
            await self._fault(exc, responder, None)
        finally:
            self.engine.host.request_ended()
            self.config.leave_context(entered)

    async def _answer(self, scope: Scope, responder: Responder, endpoint: str) -> StandaloneStream | None:
        """Answer the request; a GET that opens the session's stream gets it back, claimed, to run."""
        headers = checks.header_map(scope.get("headers", []))
        lookup: SessionLookup | None = None
        self._check_host_and_origin(headers)
        method = scope.get("method", "GET")
        if method == "POST" and "expect" not in headers:
            call_ahead = self.engine.host.call_ahead(endpoint, headers.get("authorization"))
            if call_ahead is not None and await _looks_like_a_call(responder):
                call_ahead()  # goes out with the session's read and the credential's check
        session_id = headers.get(SESSION_HEADER)
        if session_id:
            # Fetch the session while the credential is checked: two Redis round trips
            # overlap instead of adding up. It is used only once the credential passed.
            lookup = self.engine.sessions.lookup(session_id)
        identity = await self._authenticate(endpoint, headers, scope)
        if method == "POST":
            await self._post(identity, headers, scope.get("headers", ()), responder, lookup)
        elif method == "GET":
            return await self._get(identity, headers, responder, lookup)
        elif method == "DELETE":
            await self._delete(identity, headers, responder, lookup)
        else:
            raise HttpProblem(405, SERVER_ERROR, "Method not allowed", headers=[(b"allow", b"GET, POST, DELETE")])
        return None

    async def _fault(self, exc: BaseException, responder: Responder, request_id: jsonrpc.RequestId | None) -> None:
        """A 503 with Retry-After when Redis or the database did not answer, else a -32603;
        both as JSON-RPC errors, with the request's id once it was read. A stream already
        under way (only streams are sent in parts) gets the error as its last event."""
        if self.config.is_unavailable(exc):
            log.warning("MCP request failed, a dependency is unavailable: %s", exc)
            status, error = 503, JsonRpcError(SERVER_ERROR, "Service unavailable: retry later")
            headers = [(b"retry-after", str(self.config.retry_after_seconds).encode())]
        else:
            log.exception("internal error in the MCP transport")
            status, error, headers = 500, JsonRpcError(jsonrpc.INTERNAL_ERROR, "Internal error"), []
        if responder.open:
            await responder.end(sse.event(jsonrpc.dumps(jsonrpc.error(request_id, error))))
        elif not responder.started:
            await responder.json(status, jsonrpc.error(request_id, error), headers)

    # --- checks shared by every method -----------------------------------------------

    def _check_host_and_origin(self, headers: dict[str, str]) -> None:
        host = headers.get("host")
        if self.config.trust_forwarded_host and "x-forwarded-host" in headers:
            host = headers["x-forwarded-host"].split(",")[0]
        if not checks.host_allowed(host, self.config.allowed_hosts):
            raise HttpProblem(403, SERVER_ERROR, f"Forbidden: host {host!r} is not allowed")
        origin = headers.get("origin")
        if not checks.origin_allowed(origin, self.config.allowed_origins, self.config.allowed_hosts):
            raise HttpProblem(403, SERVER_ERROR, f"Forbidden: origin {origin!r} is not allowed")

    def _origin(self, headers: dict[str, str], scope: Scope) -> str:
        """Scheme and authority the client sent the request to (behind a trusted proxy, the
        ones the proxy was asked for)."""
        scheme = str(scope.get("scheme") or "http")
        host = headers.get("host", "")
        if self.config.trust_forwarded_host:
            host = headers.get("x-forwarded-host", host).split(",")[0].strip()
            scheme = headers.get("x-forwarded-proto", scheme).split(",")[0].strip()
        return f"{scheme.lower()}://{host.lower()}"

    async def _authenticate(self, endpoint: str, headers: dict[str, str], scope: Scope) -> Identity:
        try:
            identity: Identity = await self.engine.host.authenticate(
                endpoint, headers.get("authorization"), self._origin(headers, scope)
            )
            return identity
        except AuthError as exc:
            raise _auth_problem(exc) from None

    def _authorize(self, identity: Identity, message: Message) -> None:
        """403 before dispatch when the credential may not send this request at all."""
        if message.is_request and message.method != "initialize":
            try:
                self.engine.host.authorize(identity, message.method)
            except AuthError as exc:
                raise _auth_problem(exc) from None

    async def _session(self, identity: Identity, headers: dict[str, str], lookup: SessionLookup | None) -> Session:
        if lookup is None:
            raise HttpProblem(400, SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required")
        session = await lookup.session()
        # A session bound to another credential looks exactly like a missing one.
        if session is None or session.subject != identity.subject:
            raise HttpProblem(404, SESSION_NOT_FOUND, "Session not found")
        if self.engine.sessions.touch_due(session):
            detach(self.engine.sessions.touch(session))
        version = headers.get(VERSION_HEADER)
        # Any supported value is fine, even one that differs from the negotiated version.
        if version is not None and version not in SUPPORTED:
            raise HttpProblem(
                400,
                SERVER_ERROR,
                f"Bad Request: unsupported MCP-Protocol-Version {version!r}; supported: {', '.join(SUPPORTED)}",
            )
        return session

    # --- POST ---------------------------------------------------------------------------

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise HttpProblem(400, SERVER_ERROR, "Client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.config.max_body_bytes:
                raise HttpProblem(413, SERVER_ERROR, f"Payload too large (limit {self.config.max_body_bytes} bytes)")
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _post(
        self,
        identity: Identity,
        headers: dict[str, str],
        raw_headers: Iterable[tuple[bytes, bytes]],
        responder: Responder,
        lookup: SessionLookup | None,
    ) -> None:
        accept = headers.get("accept")
        if not (checks.accepts(accept, checks.JSON) and checks.accepts(accept, checks.SSE)):
            raise HttpProblem(
                406, SERVER_ERROR, "Not Acceptable: Accept must list application/json and text/event-stream"
            )
        if not checks.is_json_content_type(headers.get("content-type")):
            raise HttpProblem(415, SERVER_ERROR, "Unsupported Media Type: Content-Type must be application/json")
        body = await self._read_body(responder.receive)
        try:
            payload = jsonrpc.parse(body)
            self.config.limits.check(body, payload)
        except JsonRpcError as exc:
            raise HttpProblem(400, exc.code, exc.message) from None
        if is_modern(headers.get(VERSION_HEADER), payload):
            await self.stateless.post(identity, headers, raw_headers, payload, responder)
            return
        if isinstance(payload, list):
            await self._post_batch(identity, headers, payload, responder, lookup)
            return
        try:
            message = jsonrpc.validate(payload)
        except JsonRpcError as exc:
            raise HttpProblem(400, exc.code, exc.message) from None
        self._authorize(identity, message)
        if message.is_request and message.method == "initialize":
            await self._initialize(identity, headers, message, responder)
            return
        session = await self._session(identity, headers, lookup)
        if not message.is_request:
            await self._absorb(session, message)
            await responder.whole(202, b"", [])
            return
        with self._in_flight.enter(session.id) as admitted:
            if not admitted:
                raise self._busy()
            stream = self._post_stream(session, responder, [message])
            try:
                # A client that goes away does not cancel the call: its result is stored for resumption.
                await stream.finish(await self.engine.handle(identity, message, session, stream))
            except Exception as exc:
                raise RequestFailed(message.id) from exc
            finally:
                stream.stop()

    def _post_stream(self, session: Session, responder: Responder, requests: list[Message]) -> PostStream:
        """The answer stream of a POST carrying ``requests`` (one, or a batch's)."""
        return PostStream(
            responder,
            self._streams,
            session.id,
            session.protocol_version,
            request_ids=tuple(m.id for m in requests),
            tool_call=all(m.method == "tools/call" for m in requests),
        )

    def _busy(self) -> HttpProblem:
        limit = self.config.limits.session_max_in_flight
        return HttpProblem(
            429,
            SERVER_ERROR,
            f"Too many requests: this session already has {limit} requests running; retry when one has ended",
            headers=[(b"retry-after", b"1")],
        )

    async def _initialize(
        self, identity: Identity, headers: dict[str, str], message: Message, responder: Responder
    ) -> None:
        if headers.get(SESSION_HEADER):
            raise HttpProblem(
                400,
                INVALID_REQUEST,
                "Bad Request: initialize must not carry an Mcp-Session-Id (the session is already initialized)",
            )
        session, response = await self.engine.initialize(identity, message)
        await responder.json(200, response, [(SESSION_HEADER.encode(), session.id.encode())])

    async def _absorb(self, session: Session, message: Message) -> None:
        if message.is_notification:
            await self.engine.handle_notification(session, message)
        else:
            await self.engine.handle_response(session, message)

    async def _post_batch(
        self,
        identity: Identity,
        headers: dict[str, str],
        payload: list[Any],
        responder: Responder,
        lookup: SessionLookup | None,
    ) -> None:
        if not payload:
            raise HttpProblem(400, INVALID_REQUEST, "Invalid Request: empty batch")
        try:
            self.config.limits.check_batch(len(payload))
        except JsonRpcError as exc:
            raise HttpProblem(400, exc.code, exc.message) from None
        for item in payload:
            with contextlib.suppress(JsonRpcError):  # invalid items are answered one by one below
                self._authorize(identity, jsonrpc.validate(item))
        session = await self._session(identity, headers, lookup)
        if not allows_batches(session.protocol_version):
            raise HttpProblem(
                400, INVALID_REQUEST, f"Invalid Request: batches are not part of protocol {session.protocol_version}"
            )
        with self._in_flight.enter(session.id) as admitted:
            if not admitted:
                raise self._busy()
            await self._run_batch(session, identity, payload, responder)

    async def _run_batch(self, session: Session, identity: Identity, payload: list[Any], responder: Responder) -> None:
        responses: list[dict[str, Any]] = []
        requests: list[Message] = []
        for item in payload:
            try:
                message = jsonrpc.validate(item)
            except JsonRpcError as exc:
                responses.append(jsonrpc.error(None, exc))
                continue
            if message.is_request and message.method == "initialize":
                responses.append(
                    jsonrpc.error(message.id, JsonRpcError(INVALID_REQUEST, "initialize cannot be batched"))
                )
            elif message.is_request:
                requests.append(message)
            else:
                await self._absorb(session, message)
        if not requests and not responses:
            await responder.whole(202, b"", [])
            return
        stream = self._post_stream(session, responder, requests)
        # A batch's requests take turns on a few slots: a thousand of them must not hold a
        # thousand Redis connections and tasks of this process at once.
        turns = asyncio.Semaphore(self.config.limits.batch_concurrency)

        async def handle(message: Message) -> dict[str, Any] | Relayed | None:
            async with turns:
                return await self.engine.handle(identity, message, session, stream)

        try:
            answers = await asyncio.gather(*(handle(m) for m in requests))
            for answer in answers:
                if isinstance(answer, Relayed):
                    # Background calls in a batch: their stored final event is the response.
                    if answer.final_event is not None and answer.final_event.data:
                        responses.append(jsonrpc.parse(answer.final_event.data))
                elif answer is not None:
                    responses.append(answer)
            await stream.finish(responses or None)
        finally:
            stream.stop()

    # --- GET ----------------------------------------------------------------------------

    async def _get(
        self,
        identity: Identity,
        headers: dict[str, str],
        responder: Responder,
        lookup: SessionLookup | None,
    ) -> StandaloneStream | None:
        """The session's standalone stream, claimed, for the caller to run; a request's stream
        resumed (``Last-Event-ID``) is served here, and None is returned."""
        if not checks.accepts(headers.get("accept"), checks.SSE):
            raise HttpProblem(406, SERVER_ERROR, "Not Acceptable: Accept must list text/event-stream")
        session = await self._session(identity, headers, lookup)
        last_event_id = headers.get("last-event-id")
        resume_after = None
        if last_event_id:
            parsed = parse_event_id(last_event_id)
            if parsed is None or not await self.events.exists(session.id, parsed[0]):
                raise HttpProblem(400, SERVER_ERROR, "Bad Request: unknown or expired Last-Event-ID")
            if parsed[0] != names.STANDALONE_STREAM:
                # A request's stream, resumed: allowed while the standalone stream is open.
                await self._follow(session, parsed[0], parsed[1], responder)
                return None
            resume_after = parsed[1]
        stream = StandaloneStream(self._services, self.hub(), session, identity, responder, resume_after)
        if not await stream.claim():
            raise HttpProblem(409, SERVER_ERROR, "Conflict: Only one SSE stream is allowed per session")
        return stream

    async def _follow(self, session: Session, stream_id: str, after: str, responder: Responder) -> None:
        """Resume a stream: its events after ``after``, then live ones, until its final event
        or the client leaves. While it is quiet, its producer is checked: a stream whose
        producer died gets its end here (``liveness``)."""
        await responder.start(200, list(sse.HEADERS))
        self.drain.track(responder, session.id, stream_id, session.protocol_version)

        async def watch() -> bool:
            await self.watch.check(session.id, stream_id)
            return not responder.open

        async def pump() -> None:
            follow = self.events.follow(session.id, stream_id, after, watch=watch, watch_every=self.watch.interval)
            async for event in follow:
                if event.data:
                    await responder.write(sse.event(event.data, event_id=event.event_id))

        beat = sse.keep_alive(responder, self.config.keepalive_seconds)
        tasks = [asyncio.ensure_future(c) for c in (pump(), beat, watch_disconnect(responder))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await responder.end()

    # --- DELETE -------------------------------------------------------------------------

    async def _delete(
        self,
        identity: Identity,
        headers: dict[str, str],
        responder: Responder,
        lookup: SessionLookup | None,
    ) -> None:
        session = await self._session(identity, headers, lookup)
        await self.engine.sessions.delete(session.id, session.tenant_id)
        await responder.whole(200, b"", [])
