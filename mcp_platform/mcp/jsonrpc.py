"""JSON-RPC 2.0 framing for MCP: parsing, classification, responses, error codes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from mcp_platform.mcp import text

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# -32000..-32019 are implementation-defined; the TS SDK uses these two and clients know them.
SERVER_ERROR = -32000
SESSION_NOT_FOUND = -32001
# 2026-07-28: a routing header that does not match the body, a client capability the request
# needed but did not declare, a protocol version this endpoint does not speak.
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

RequestId = str | int


class JsonRpcError(Exception):
    """An error answer: JSON-RPC code and message, plus the HTTP status it travels with."""

    def __init__(self, code: int, message: str, *, data: Any = None, http_status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def dumps(message: Any) -> bytes:
    """Compact one-line UTF-8 JSON (SSE data lines must not contain newlines).

    orjson, because this runs for every message: about 20 times faster than the json module
    on a call's answer (timeit, 2-core machine). Non-string keys become strings as with
    json; NaN and infinities become null. Text a tool produced with a lone surrogate has it
    replaced (``mcp_platform.mcp.text``): the output is always valid UTF-8.
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return orjson.dumps(text.encodable(message), option=orjson.OPT_NON_STR_KEYS)


def parse(body: bytes) -> Any:
    """The JSON value of a request body; JsonRpcError(-32700) for anything that is not strict
    JSON in UTF-8: bad syntax, NaN, lone surrogates, integers beyond 64 bits, nesting past
    orjson's limit (so no input reaches a RecursionError)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise JsonRpcError(PARSE_ERROR, "Parse error: the body is not valid JSON", http_status=400) from None


def is_valid_id(value: Any) -> TypeGuard[RequestId]:
    # bool is an int in Python, and floats and null are not ids.
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


@dataclass(frozen=True)
class Message:
    raw: dict[str, Any]

    @property
    def is_request(self) -> bool:
        return "method" in self.raw and "id" in self.raw

    @property
    def is_notification(self) -> bool:
        return "method" in self.raw and "id" not in self.raw

    @property
    def id(self) -> RequestId:
        return self.raw["id"]  # type: ignore[no-any-return]

    @property
    def method(self) -> str:
        return self.raw["method"]  # type: ignore[no-any-return]

    @property
    def params(self) -> dict[str, Any]:
        return self.raw.get("params") or {}


def validate(item: Any) -> Message:
    """Check one JSON-RPC message's shape; raises JsonRpcError(-32600) when it is not one."""
    if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 object", http_status=400)
    if "method" in item:
        if not isinstance(item["method"], str) or not item["method"]:
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: method must be a non-empty string", http_status=400)
        if "id" in item and not is_valid_id(item["id"]):
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer", http_status=400)
        if "params" in item and not isinstance(item["params"], dict):
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: params must be an object", http_status=400)
        return Message(item)
    if "id" not in item or not is_valid_id(item["id"]) or ("result" in item) == ("error" in item):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: not a request, notification or response", http_status=400)
    return Message(item)


def result(request_id: RequestId, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: RequestId | None, exc: JsonRpcError) -> dict[str, Any]:
    # An unreadable id is answered with id null, as JSON-RPC 2.0 prescribes.
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_error()}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def request(request_id: RequestId, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
