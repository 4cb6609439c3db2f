"""Streamable HTTP for stateless requests (protocol revision 2026-07-28).

A POST is classified as stateless by ``versions.is_modern`` (its ``_meta`` names a protocol
version, or its MCP-Protocol-Version header is not a handshake-era one); everything else
stays on the legacy transport (``transport/http.py``). The checks here run in the order the
protocol notes (§10.2) give, after the shared ones (Host/Origin, credential, Accept,
Content-Type, size, JSON): notifications are accepted (202), batches and responses refused,
then the routing headers, the envelope, the version and the ``Mcp-Param-*`` mirrors, each
with its exact error code and status, and every error echoes the request's id.

Answers are JSON, or SSE when the request emits progress or log messages first. There are
no event ids and no resumption in this revision: a client that closes the stream cancels
its request. ``subscriptions/listen`` holds a stream open for change notifications.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from mcp_platform.mcp import jsonrpc
from mcp_platform.mcp.host import Identity
from mcp_platform.mcp.ids import UniqueIds
from mcp_platform.mcp.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    JsonRpcError,
    Message,
)
from mcp_platform.mcp.stateless import Envelope, StatelessEngine
from mcp_platform.mcp.transport.listen import ListenStream
from mcp_platform.mcp.transport.post_stream import PostStream, StreamOptions
from mcp_platform.mcp.transport.responder import RequestFailed, Responder
from mcp_platform.mcp.versions import (
    MODERN,
    MODERN_META_CAPABILITIES_KEY,
    MODERN_META_VERSION_KEY,
    TASKS_EXTENSION,
)

ROUTING_HEADERS = ("mcp-method", "mcp-name", "mcp-protocol-version")
# A request's stand-in session: where a background call's worker writes its messages.
_session_ids = UniqueIds("stateless-")
# Methods whose Mcp-Name header mirrors a parameter, and which parameter.
NAMED_BY = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


def decode_header_value(value: str) -> str | None:
    """A routing header's value: plain, or ``=?base64?…?=`` for unsafe or non-ASCII text.
    None when the base64 form is malformed."""
    value = value.strip()  # optional whitespace around a field value is not part of it (RFC 9110 §5.5)
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def _same(header: str | None, value: Any) -> bool:
    """Whether a header mirrors a parameter: strings exactly, numbers numerically, booleans
    as true/false."""
    if header is None:
        return False
    if isinstance(value, bool):
        return header == ("true" if value else "false")
    if isinstance(value, int | float):
        try:
            return float(header) == float(value)
        except ValueError:
            return False
    return isinstance(value, str) and header == value


class StatelessHttp:
    """The POST of a stateless request, after the checks every POST shares."""

    def __init__(
        self,
        engine: StatelessEngine,
        streams: StreamOptions,
        *,
        register_listener: Callable[[ListenStream], Any],
        authorize: Callable[[Identity, Message], None],
    ) -> None:
        """``streams``: how answer streams behave here (not resumable, cancelled by a client
        that leaves). ``authorize`` raises the transport's 403 when the credential may not
        send a method at all (an OAuth token without the scope it needs), as on the legacy leg."""
        self.engine = engine
        self.streams = streams
        self._register_listener = register_listener
        self._authorize = authorize

    async def post(
        self,
        identity: Identity,
        headers: dict[str, str],
        raw_headers: Iterable[tuple[bytes, bytes]],
        payload: Any,
        responder: Responder,
    ) -> None:
        request_id = payload.get("id") if isinstance(payload, dict) and jsonrpc.is_valid_id(payload.get("id")) else None
        try:
            message = self._message(payload)
            if message is None:  # a notification: nothing to answer in this revision
                await responder.whole(202, b"", [])
                return
            self._authorize(identity, message)
            envelope = await self._check(identity, headers, raw_headers, message)
        except JsonRpcError as exc:
            await responder.json(exc.http_status if exc.http_status != 200 else 400, jsonrpc.error(request_id, exc))
            return
        if message.method == "subscriptions/listen":
            await self._listen(identity, message, envelope, responder)
            return
        stream = PostStream(responder, self.streams, _session_ids.next())
        try:
            answer = await self.engine.handle(identity, message, envelope, stream)
            if isinstance(answer, JsonRpcError):
                await stream.finish(jsonrpc.error(message.id, answer), answer.http_status)
            else:
                await stream.finish(answer)
        except Exception as exc:
            raise RequestFailed(message.id) from exc
        finally:
            stream.stop()

    @staticmethod
    def _message(payload: Any) -> Message | None:
        if isinstance(payload, list):
            raise JsonRpcError(
                INVALID_REQUEST, "Invalid Request: batches are not part of this revision", http_status=400
            )
        message = jsonrpc.validate(payload)
        if message.is_notification:
            return None
        if not message.is_request:
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: a response body is not a request", http_status=400)
        return message

    async def _check(
        self,
        identity: Identity,
        headers: dict[str, str],
        raw_headers: Iterable[tuple[bytes, bytes]],
        message: Message,
    ) -> Envelope:
        """The request's envelope, after the routing headers, the envelope itself, the version
        and the parameter mirrors were checked in the protocol's order."""
        seen: dict[bytes, int] = {}
        for name, _ in raw_headers:
            lowered = name.lower()
            seen[lowered] = seen.get(lowered, 0) + 1
        repeated = [name for name in ROUTING_HEADERS if seen.get(name.encode(), 0) > 1]
        if repeated:
            raise self._mismatch(f"Header {repeated[0]} appears more than once")
        meta = message.params.get("_meta")
        if not isinstance(meta, dict):
            raise JsonRpcError(
                INVALID_PARAMS, "Missing params._meta (protocol version and client capabilities)", http_status=400
            )
        version = meta.get(MODERN_META_VERSION_KEY)
        if not isinstance(version, str) or not version:
            raise JsonRpcError(INVALID_PARAMS, f"Missing params._meta[{MODERN_META_VERSION_KEY!r}]", http_status=400)
        if not isinstance(meta.get(MODERN_META_CAPABILITIES_KEY), dict):
            raise JsonRpcError(
                INVALID_PARAMS, f"Missing params._meta[{MODERN_META_CAPABILITIES_KEY!r}] (an object)", http_status=400
            )
        if headers.get("mcp-protocol-version") != version:
            raise self._mismatch("MCP-Protocol-Version must equal params._meta's protocolVersion")
        method = headers.get("mcp-method")
        if method is None or decode_header_value(method) != message.method:
            raise self._mismatch("Mcp-Method must name the request's method")
        named = NAMED_BY.get(message.method)
        if named is not None:
            value = headers.get("mcp-name")
            if value is None or decode_header_value(value) != message.params.get(named):
                raise self._mismatch(f"Mcp-Name must equal params.{named}")
        if version not in MODERN:
            raise JsonRpcError(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported protocol version {version!r}; this endpoint speaks {', '.join(MODERN)} "
                "(and the handshake-era revisions through initialize)",
                data={"supported": list(MODERN), "requested": version},
                http_status=400,
            )
        if message.method == "tools/call":
            await self._check_param_headers(identity, headers, message)
        return Envelope.of(meta, version)

    async def _check_param_headers(self, identity: Identity, headers: dict[str, str], message: Message) -> None:
        """Arguments a tool's schema marks ``x-mcp-header`` must be mirrored, exactly, in
        ``Mcp-Param-<Name>`` (so gateways can route on them)."""
        name = message.params.get("name")
        if not isinstance(name, str):
            return
        mirrored = await self.engine.host.header_params(identity, name)
        arguments = message.params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        for header_name, path in mirrored:
            value: Any = arguments
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            header = headers.get(f"mcp-param-{header_name.lower()}")
            if value is None:
                if header is not None:
                    raise self._mismatch(f"Mcp-Param-{header_name} given for an argument the request does not have")
                continue
            if header is None:
                raise self._mismatch(f"Mcp-Param-{header_name} must mirror argument {'.'.join(path)}")
            if not _same(decode_header_value(header), value):
                raise self._mismatch(f"Mcp-Param-{header_name} does not match argument {'.'.join(path)}")

    @staticmethod
    def _mismatch(message: str) -> JsonRpcError:
        return JsonRpcError(HEADER_MISMATCH, f"Header mismatch: {message}", http_status=400)

    # --- subscriptions/listen --------------------------------------------------------

    async def _listen(self, identity: Identity, message: Message, envelope: Envelope, responder: Responder) -> None:
        wanted = message.params.get("notifications")
        if not isinstance(wanted, dict):
            error = JsonRpcError(INVALID_PARAMS, "params.notifications (an object) is required", http_status=400)
            await responder.json(400, jsonrpc.error(message.id, error))
            return
        stream = ListenStream(
            host=self.engine.host,
            identity=identity,
            subscription_id=message.id,
            wanted=wanted,
            responder=responder,
            server_meta=self.engine.complete("subscriptions/listen", {})["_meta"],
            follows_tasks=envelope.has_extension(TASKS_EXTENSION),
        )
        with contextlib.suppress(asyncio.CancelledError):
            await stream.run(self._register_listener)
