"""A small MCP client for upstream servers (Streamable HTTP, protocol 2025-11-25).

Toolbay speaks to upstreams as a client: ``initialize``, ``tools/list``, ``tools/call``
with the notifications and server→client requests a call brings along, and the standing
GET stream that carries ``notifications/tools/list_changed``. Its traffic goes through
the guarded outbound pool (``netguard``), so an upstream URL is held to the same SSRF
rules as an HTTP tool, and responses are capped like theirs.

Sessions are shared by all calls of a process to the same upstream (Streamable HTTP
allows concurrent requests on one session) and re-initialized when the upstream forgets
them (404). An upstream whose calls carry each user's own token (``user_credential``) gets a
session per user (``scope`` names the user): users never share a session or a token, and an
upstream that binds its sessions to the credential that made them (the SDK's servers do)
sees each user's session used only with that user's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from tools_app.backends.connections import UserCredential
from tools_app.backends.http.netguard import DestinationBlocked, outbound_client, read_at_most
from tools_app.backends.vault import redact

log = logging.getLogger(__name__)

PROTOCOL_VERSION = "2025-11-25"
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
CLIENT_INFO = {"name": "toolbay", "title": "Toolbay", "version": "1.0"}
# Toolbay relays elicitation and sampling to its own client when that client can answer.
CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}}
ACCEPT = "application/json, text/event-stream"
ERROR_BODY_CHARS = 300
# How long a cancellation notice to the upstream may delay the cancelled call's end.
CANCEL_NOTICE_SECONDS = 0.5

# A message from the upstream that is not the awaited response: a notification (the
# handler's return value is ignored) or a request (it returns the result, or raises
# UpstreamError to answer with an error).
MessageHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


class UpstreamError(Exception):
    """The upstream answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (error {code})")
        self.code = code
        self.message = message
        self.data = data


class UpstreamUnavailable(Exception):
    """The upstream could not be reached or broke the protocol; the message is safe to show.
    ``status``: the HTTP status it answered, when that was the trouble."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class InstanceRestarting(UpstreamUnavailable):
    """A packaged server's instance is down and its runner starts it again on a call after
    ``retry_in`` seconds (its back-off); raised by the instance locator."""

    def __init__(self, message: str, *, retry_in: float) -> None:
        super().__init__(message)
        self.retry_in = retry_in


# The ``data`` of the JSON-RPC error a packaged server's runner answers a call with when the
# instance ended under it (the call may or may not have had its effect).
INSTANCE_ENDED = "toolbay/instance-ended"
# The ``_meta`` key that tells a packaged server's runner who makes a call (an opaque id of
# the calling principal); the runner removes it before the server sees the call. Sent to
# Toolbay's own runners only.
CALLER_META = "toolbay/caller"


class ListenUnsupported(UpstreamUnavailable):
    """The upstream offers no standing GET stream (405)."""


class _SessionExpired(Exception):
    pass


@dataclass(frozen=True)
class UpstreamEndpoint:
    """Everything needed to talk to one upstream; equal endpoints may share a session."""

    id: int
    name: str
    url: str
    headers: tuple[tuple[str, str], ...]
    secret_values: tuple[str, ...]
    timeout_seconds: float
    # A packaged server's instance (tools_app.backends.packaged): ``url`` is empty until its
    # runner is located; ``scope`` names the instance (tenant, user); ``internal`` endpoints are
    # Toolbay's own runners, reached without the SSRF guard (which blocks their addresses).
    packaged: bool = False
    per_user: bool = False
    scope: str = ""
    internal: bool = False
    # Calls send the calling user's own token instead of ``headers`` (see backend.as_caller);
    # ``headers`` stay the service credential that lists the upstream's tools.
    user_credential: UserCredential | None = None


@dataclass
class _SseEvent:
    event_id: str | None
    data: str


async def _sse_events(response: httpx.Response, *, total_limit: int | None) -> AsyncIterator[_SseEvent]:
    """SSE events of a response; UpstreamUnavailable when it exceeds the size caps."""
    event_limit = settings.TOOLBAY_HTTP_MAX_RESPONSE_BYTES
    data: list[str] = []
    size = total = 0
    event_id: str | None = None
    async for line in response.aiter_lines():
        total += len(line) + 1
        if total_limit is not None and total > total_limit:
            raise UpstreamUnavailable(f"the upstream's response exceeds the limit of {total_limit} bytes")
        if line == "":
            if data:
                yield _SseEvent(event_id, "\n".join(data))
            data, size = [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            size += len(value)
            if size > event_limit:
                raise UpstreamUnavailable(f"an upstream event exceeds the limit of {event_limit} bytes")
            data.append(value)
        elif name == "id":
            event_id = value
    if data:
        yield _SseEvent(event_id, "\n".join(data))


def _parse(data: str | bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


class UpstreamSession:
    def __init__(self, endpoint: UpstreamEndpoint) -> None:
        self.endpoint = endpoint
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._init_lock = asyncio.Lock()
        self._initialized = False

    # --- plumbing -------------------------------------------------------------------------

    def _headers(self, *, accept: str = ACCEPT) -> dict[str, str]:
        headers = dict(self.endpoint.headers)
        headers["Accept"] = accept
        headers["Content-Type"] = "application/json"
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    def _safe(self, text: str) -> str:
        return redact(text, self.endpoint.secret_values)

    @contextlib.asynccontextmanager
    async def _open(
        self, method: str, body: dict[str, Any] | None, *, accept: str = ACCEPT, timeout: float | None = None
    ) -> AsyncIterator[httpx.Response]:
        client = internal_client() if self.endpoint.internal else outbound_client()
        content = json.dumps(body).encode() if body is not None else None
        read_timeout = timeout if timeout is not None else self.endpoint.timeout_seconds
        request = client.build_request(
            method,
            self.endpoint.url,
            headers=self._headers(accept=accept),
            content=content,
            timeout=httpx.Timeout(read_timeout, connect=min(10.0, self.endpoint.timeout_seconds)),
        )
        try:
            response = await client.send(request, stream=True)
        except DestinationBlocked as exc:
            raise UpstreamUnavailable(f"the request was refused: {exc}") from None
        except httpx.TimeoutException:
            raise UpstreamUnavailable("the upstream did not answer in time") from None
        except httpx.TransportError as exc:
            raise UpstreamUnavailable(self._safe(f"cannot reach the upstream: {exc or type(exc).__name__}")) from None
        try:
            yield response
        except httpx.TimeoutException:
            raise UpstreamUnavailable("the upstream did not answer in time") from None
        except httpx.TransportError as exc:
            raise UpstreamUnavailable(self._safe(f"the connection to the upstream broke: {exc}")) from None
        finally:
            await response.aclose()

    async def _status_problem(self, response: httpx.Response) -> UpstreamUnavailable:
        body = b""
        with contextlib.suppress(Exception):
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > ERROR_BODY_CHARS * 4:
                    break
        text = " ".join(body.decode("utf-8", "replace").split())[:ERROR_BODY_CHARS]
        if response.status_code in (401, 403):
            lead = f"the upstream refused the credential (HTTP {response.status_code})"
        else:
            lead = f"the upstream answered HTTP {response.status_code}"
        return UpstreamUnavailable(self._safe(f"{lead}: {text}" if text else lead), status=response.status_code)

    async def _exchange(
        self, message: dict[str, Any], on_message: MessageHandler | None, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """POST one message; for a request, return its result (or raise UpstreamError)."""
        # Notifications and our answers to the upstream's requests get no response.
        request_id = message.get("id") if "method" in message else None
        async with self._open("POST", message, timeout=timeout) as response:
            if response.status_code == 404 and self.session_id and message.get("method") != "initialize":
                raise _SessionExpired()
            if response.status_code >= 400:
                raise await self._status_problem(response)
            if request_id is None:
                return None
            if message.get("method") == "initialize":
                self.session_id = response.headers.get("mcp-session-id") or None
            content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type == "application/json":
                body = await read_at_most(response, settings.TOOLBAY_HTTP_MAX_RESPONSE_BYTES)
                if body is None:
                    raise UpstreamUnavailable("the upstream's response is too large")
                answer = _parse(body)
                if answer is None or answer.get("id") != request_id:
                    raise UpstreamUnavailable("the upstream answered with something that is not the response")
                return _result_of(answer)
            if content_type != "text/event-stream":
                raise UpstreamUnavailable(f"the upstream answered with an unexpected content type {content_type!r}")
            async for event in _sse_events(response, total_limit=settings.TOOLBAY_HTTP_MAX_RESPONSE_BYTES):
                incoming = _parse(event.data)
                if incoming is None:
                    continue
                if "method" not in incoming and incoming.get("id") == request_id:
                    return _result_of(incoming)
                await self._dispatch(incoming, on_message)
        raise UpstreamUnavailable("the upstream closed the stream before answering")

    async def _dispatch(self, incoming: dict[str, Any], on_message: MessageHandler | None) -> None:
        method = incoming.get("method")
        if not isinstance(method, str):
            return  # a stray response
        if "id" not in incoming:
            if on_message is not None:
                try:
                    await on_message(incoming)
                except Exception:
                    log.exception("upstream %s: handling %s failed", self.endpoint.name, method)
            return
        # A request from the upstream (ping, elicitation, sampling, ...): answer it.
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": incoming["id"]}
        try:
            if method == "ping":
                answer["result"] = {}
            elif on_message is None:
                raise UpstreamError(-32601, f"Method not found: {method}")
            else:
                result = await on_message(incoming)
                if result is None:
                    raise UpstreamError(-32601, f"Method not found: {method}")
                answer["result"] = result
        except UpstreamError as exc:
            answer["error"] = {"code": exc.code, "message": exc.message}
        try:
            await self._exchange(answer, None)
        except (UpstreamUnavailable, _SessionExpired) as exc:
            # The request's own stream says what became of it (a 404 here must not read as
            # "the call never arrived", which would send it again).
            log.warning("upstream %s: cannot deliver the answer to its %s: %s", self.endpoint.name, method, exc)

    # --- protocol ---------------------------------------------------------------------------

    async def initialize(self) -> None:
        self.session_id = None
        self.protocol_version = None
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        result = await self._exchange(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": "initialize", "params": params}, None
        )
        assert result is not None
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            raise UpstreamUnavailable(f"the upstream speaks protocol version {version!r}, which Toolbay does not")
        self.protocol_version = version
        self.capabilities = result.get("capabilities") or {}
        self.server_info = result.get("serverInfo") or {}
        await self._exchange({"jsonrpc": "2.0", "method": "notifications/initialized"}, None)
        if "logging" in self.capabilities:
            # Everything comes through; each call's ToolContext filters by its client's level.
            with contextlib.suppress(UpstreamError):
                await self._exchange(self._request("logging/setLevel", {"level": "debug"}), None)
        self._initialized = True

    async def ensure_initialized(self) -> None:
        if self._initialized:
            return
        async with self._init_lock:
            if not self._initialized:
                await self.initialize()

    def _request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_message: MessageHandler | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send a request and return its result; raises UpstreamError or UpstreamUnavailable.

        When the awaiting task is cancelled, the upstream is told with
        ``notifications/cancelled``.
        """
        for attempt in range(2):
            await self.ensure_initialized()
            message = self._request(method, params)
            try:
                result = await self._exchange(message, on_message, timeout)
            except _SessionExpired:
                self._initialized = False
                if attempt == 0:
                    continue
                raise UpstreamUnavailable("the upstream keeps forgetting its session") from None
            except asyncio.CancelledError:
                await self._tell_cancelled(message["id"])
                raise
            assert result is not None
            return result
        raise AssertionError("unreachable")

    async def _tell_cancelled(self, request_id: int) -> None:
        """Tell the upstream to stop, best effort and briefly: the caller is being cancelled.

        Awaited rather than sent in the background so it is out before a short-lived event
        loop (a test call, a worker's run) ends."""
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "The Toolbay call was cancelled or timed out."},
        }
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CANCEL_NOTICE_SECONDS):
                await self._exchange(notice, None)

    async def list_tools(self) -> list[dict[str, Any]]:
        return await self.list_all("tools/list", "tools")

    async def list_all(self, method: str, key: str) -> list[dict[str, Any]]:
        """Every page of a paginated list (tools/list, resources/list, prompts/list, …)."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _page in range(1000):
            result = await self.request(method, {"cursor": cursor} if cursor else None)
            page = result.get(key)
            if not isinstance(page, list):
                raise UpstreamUnavailable(f"the upstream's {method} result has no {key} list")
            items += [item for item in page if isinstance(item, dict)]
            cursor = result.get("nextCursor")
            if not cursor:
                return items
        raise UpstreamUnavailable(f"the upstream's {method} does not end")

    async def listen(self, on_message: MessageHandler) -> None:
        """Follow the standing GET stream until the upstream ends it.

        Raises ListenUnsupported when the upstream has none (405), UpstreamUnavailable on
        trouble.
        """
        await self.ensure_initialized()
        async with self._open("GET", None, accept="text/event-stream", timeout=None) as response:
            if response.status_code == 405:
                raise ListenUnsupported("the upstream offers no GET stream")
            if response.status_code == 404 and self.session_id:
                self._initialized = False
                raise UpstreamUnavailable("the upstream forgot the session")
            if response.status_code >= 400:
                raise await self._status_problem(response)
            async for event in _sse_events(response, total_limit=None):
                incoming = _parse(event.data)
                if incoming is not None:
                    await self._dispatch(incoming, on_message)

    async def close(self) -> None:
        """End the session on the upstream (best effort)."""
        if not self.session_id:
            return
        with contextlib.suppress(UpstreamUnavailable, _SessionExpired):
            async with self._open("DELETE", None, timeout=5.0):
                pass
        self.session_id = None
        self._initialized = False


def _result_of(answer: dict[str, Any]) -> dict[str, Any]:
    error = answer.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        raise UpstreamError(code if isinstance(code, int) else -32603, str(error.get("message", "")), error.get("data"))
    result = answer.get("result")
    if not isinstance(result, dict):
        raise UpstreamUnavailable("the upstream's response has no result object")
    return result


_internal_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def internal_client() -> httpx.AsyncClient:
    """The process's pooled client for Toolbay's own runners (one per event loop)."""
    loop = asyncio.get_running_loop()
    client = _internal_clients.get(loop)
    if client is None:
        limits = httpx.Limits(max_connections=settings.TOOLBAY_HTTP_MAX_CONNECTIONS, keepalive_expiry=30)
        client = _internal_clients[loop] = httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=None, limits=limits
        )
    return client


_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[UpstreamEndpoint, UpstreamSession]] = (
    weakref.WeakKeyDictionary()
)
USER_SCOPE = "user:"
# Per-user sessions a process keeps per event loop; beyond it the least recently used is ended
# (its user's next call initializes again: one round trip). Each costs a few KiB here and a
# session at the upstream, so a process serving many users must not keep all of them.
USER_SESSIONS_KEPT = 500
_closing: set[asyncio.Task[None]] = set()


def shared_session(endpoint: UpstreamEndpoint) -> UpstreamSession:
    """The process's session with this upstream (per event loop; new settings, new session),
    for each user their own when ``endpoint.scope`` names one."""
    loop = asyncio.get_running_loop()
    sessions = _sessions.setdefault(loop, {})
    session = sessions.get(endpoint)
    if session is None:
        for stale in [e for e in sessions if (e.id, e.scope) == (endpoint.id, endpoint.scope)]:
            del sessions[stale]
        session = sessions[endpoint] = UpstreamSession(endpoint)
        if endpoint.scope.startswith(USER_SCOPE):
            _evict_users(sessions)
    elif endpoint.scope.startswith(USER_SCOPE):
        sessions[endpoint] = sessions.pop(endpoint)  # most recently used last
    return session


def _evict_users(sessions: dict[UpstreamEndpoint, UpstreamSession]) -> None:
    users = [endpoint for endpoint in sessions if endpoint.scope.startswith(USER_SCOPE)]
    for endpoint in users[: max(0, len(users) - USER_SESSIONS_KEPT)]:
        task = asyncio.get_running_loop().create_task(sessions.pop(endpoint).close())
        _closing.add(task)
        task.add_done_callback(_closing.discard)
