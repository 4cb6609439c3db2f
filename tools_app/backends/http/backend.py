"""The ``http`` backend: a tool call becomes one HTTP request to a configured API.

``backend_config``::

    {
      "method": "GET",                                 # GET POST PUT PATCH DELETE HEAD OPTIONS
      "url": "https://api.example.com/users/{user}/repos?sort={sort}",
      "query": {"per_page": "{limit}", "format": "json"},  # optional; dropped when an argument is missing
      "headers": {"Accept": "application/json"},          # optional; values may use {placeholders}
      "body": "auto",                                  # "auto" | "none" | {"template": <JSON>}
      "auth": {"type": "bearer", "secret": "github"},  # or basic (+ "username"), or header (+ "header")
                                                       # or {"type": "connection", "provider": "github",
                                                       #     "scopes": ["repo"]}: the caller's own token
                                                       #   (+ "expected_provider": {"authorization_url",
                                                       #   "token_url", "openid_connect_url"}: where the
                                                       #   API's tokens come from; the provider may then be
                                                       #   registered later, calls say how)
                                                       # or {"type": "oauth2_client_credentials",
                                                       #     "token_url": URL, "client_id": ID,
                                                       #     "secret": "<client secret>", "scopes": [...]}
      "timeout_seconds": 10,                           # optional; else the tool's timeout
      "follow_redirects": true,
      "response": {"pointer": "/data"},                # optional JSON pointer into a JSON response
      "caller_assertion": {"header": "Toolbay-Caller-Assertion", "audience": "https://api.example.com"}
                                                       # optional: a signed JWT of who calls (both keys
                                                       # optional; audience defaults to the URL's origin)
    }

``{name}`` placeholders take the argument of that name, percent-escaped for the part of
the URL they sit in; they may not appear in the scheme, host or port, so arguments can
never choose where a request goes. With ``"body": "auto"`` arguments that no placeholder
used go into a JSON body (POST, PUT, PATCH) or the query string (other methods). In a
body template a string that is exactly ``"{name}"`` becomes the argument's JSON value
(the key is left out when the argument is missing) and ``"{$arguments}"`` the whole
arguments object.

The response becomes the result: JSON gives ``structuredContent`` (validated by the
engine) plus a text block when the tool has an ``outputSchema``, else a text block;
text gives a text block; images and audio give image/audio blocks; other bytes an
embedded resource. A non-2xx status is an ``isError`` result with the status and the
start of the body (429/502/503/504 raise a retryable ``BackendError`` so idempotent
tools are retried).

Resources, resource templates and prompts use the same settings: the template's variables
(or the prompt's arguments) fill the placeholders. A read answers the body as the
resource's content (text for textual types, else a base64 blob); a prompt's endpoint
answers a GetPromptResult as JSON (``{"messages": [...]}``, or a list of messages), or text
that becomes one user message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import httpx
from django.conf import settings

from mcp_platform import tracing
from tools_app.backends import connections
from tools_app.backends.base import Backend, BackendConfigError, BackendError, CallContext, Feature
from tools_app.backends.http import client_credentials
from tools_app.backends.http.netguard import DestinationBlocked, outbound_client, read_at_most
from tools_app.backends.results import ToolError, structured_result, text_block
from tools_app.backends.vault import SecretUnavailable, redact, secret_exists, secret_value
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec, ToolSpec

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
BODY_METHODS = ("POST", "PUT", "PATCH")
CONFIG_KEYS = {
    "method",
    "url",
    "query",
    "headers",
    "body",
    "auth",
    "timeout_seconds",
    "follow_redirects",
    "response",
    "caller_assertion",
}
ASSERTION_HEADER = "Toolbay-Caller-Assertion"
AUTH_TYPES = ("bearer", "basic", "header", "connection", "token_exchange", "oauth2_client_credentials")
PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.-]+|\$arguments)\}")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers the transport owns; letting a tool set them would break framing or routing.
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
RETRYABLE_STATUSES = (429, 502, 503, 504)
# Enough of an error body for a model to see what went wrong without flooding its context.
ERROR_BODY_CHARS = 500
TEXT_TYPES = ("application/xml", "application/javascript", "application/x-www-form-urlencoded", "application/yaml")


# --- configuration --------------------------------------------------------------------


def _placeholders(text: str) -> list[str]:
    return PLACEHOLDER.findall(text)


def _check_template_map(value: Any, what: str) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BackendConfigError(f'"{what}" must be an object of strings, e.g. {{"name": "{{argument}}"}}')


def validate_config(config: dict[str, Any]) -> None:
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise BackendConfigError(f"unknown http settings {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}")
    method = config.get("method", "GET")
    if method not in METHODS:
        raise BackendConfigError(f'"method" must be one of {", ".join(METHODS)}')
    url = config.get("url")
    if not isinstance(url, str) or not url:
        raise BackendConfigError('the http backend needs a "url", e.g. "https://api.example.com/items/{id}"')
    parts = urlsplit(PLACEHOLDER.sub("x", url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendConfigError('"url" must be an absolute http:// or https:// URL')
    if _placeholders(urlsplit(url).netloc) or "{" in urlsplit(url).netloc:
        raise BackendConfigError('"url": placeholders may fill the path and query only, never the host or port')
    if parts.username or parts.password:
        raise BackendConfigError('"url" must not carry credentials; use "auth" with a secret')
    if "$arguments" in _placeholders(url):
        raise BackendConfigError('"url": {$arguments} can only be used in a body template')
    for key in ("query", "headers"):
        if key in config:
            _check_template_map(config[key], key)
    for name in config.get("headers", {}):
        if not HEADER_NAME.match(name) or name.lower() in RESERVED_HEADERS:
            raise BackendConfigError(f'"headers": {name!r} is not a header a tool may set')
    body = config.get("body", "auto")
    if body not in ("auto", "none") and not (isinstance(body, dict) and set(body) == {"template"}):
        raise BackendConfigError('"body" must be "auto", "none" or {"template": <JSON>}')
    if body not in ("auto", "none") and method not in BODY_METHODS:
        raise BackendConfigError(f'"body": a {method} request has no body; use POST, PUT or PATCH')
    _validate_auth(config.get("auth"))
    assertion = config.get("caller_assertion")
    if assertion is not None:
        if not isinstance(assertion, dict) or set(assertion) - {"header", "audience"}:
            raise BackendConfigError('"caller_assertion" must be an object with optional "header" and "audience"')
        header = assertion.get("header", ASSERTION_HEADER)
        if not isinstance(header, str) or not HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS:
            raise BackendConfigError('"caller_assertion": "header" must be a header name a tool may set')
        if not isinstance(assertion.get("audience", ""), str):
            raise BackendConfigError('"caller_assertion": "audience" must be a string')
    timeout = config.get("timeout_seconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600
    ):
        raise BackendConfigError('"timeout_seconds" must be a number of seconds between 0 and 3600')
    if not isinstance(config.get("follow_redirects", True), bool):
        raise BackendConfigError('"follow_redirects" must be true or false')
    response = config.get("response", {})
    if not isinstance(response, dict) or set(response) - {"pointer"}:
        raise BackendConfigError('"response" may only hold "pointer", a JSON pointer such as "/data"')
    pointer = response.get("pointer", "")
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise BackendConfigError('"response": "pointer" must be a JSON pointer starting with "/"')


def _validate_auth(auth: Any) -> None:
    if auth is None:
        return
    if not isinstance(auth, dict) or auth.get("type") not in AUTH_TYPES:
        raise BackendConfigError(
            '"auth" must be {"type": "bearer" | "basic" | "header", "secret": "<name>", ...}, '
            '{"type": "connection", "provider": "<name>", "scopes": [...]} or {"type": '
            '"oauth2_client_credentials", "token_url": "<url>", "client_id": "<id>", "secret": "<name>"}'
        )
    if auth["type"] in connections.USER_CREDENTIAL_TYPES:
        connections.UserCredential.parse(auth)
        return
    if auth["type"] == "oauth2_client_credentials":
        allowed = {"type", "token_url", "client_id", "secret", "scopes", "auth_method", "audience"}
        if set(auth) - allowed:
            raise BackendConfigError(f'"auth" of type oauth2_client_credentials takes only {sorted(allowed)}')
        if not isinstance(auth.get("token_url"), str) or not connections.is_web_url(auth["token_url"]):
            raise BackendConfigError('"auth": "token_url" must be the http(s) URL of the token endpoint')
        if not isinstance(auth.get("client_id"), str) or not auth["client_id"]:
            raise BackendConfigError('"auth": "client_id" must be the OAuth client ID')
        if not isinstance(auth.get("secret"), str) or not auth["secret"]:
            raise BackendConfigError('"auth" needs "secret": the name of the stored secret holding the client secret')
        if auth.get("auth_method", "client_secret_basic") not in client_credentials.AUTH_METHODS:
            methods = ", ".join(client_credentials.AUTH_METHODS)
            raise BackendConfigError(f'"auth": "auth_method" must be one of {methods}')
        if not isinstance(auth.get("audience", ""), str):
            raise BackendConfigError('"auth": "audience" must be a string')
        scopes = auth.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(scope, str) and scope for scope in scopes):
            raise BackendConfigError('"auth": "scopes" must be a list of scope strings')
        return
    if not isinstance(auth.get("secret"), str) or not auth["secret"]:
        raise BackendConfigError('"auth" needs "secret": the name of a stored secret')
    allowed = {"type", "secret"} | {"basic": {"username"}, "header": {"header", "prefix"}}.get(auth["type"], set())
    if set(auth) - allowed:
        raise BackendConfigError(f'"auth" of type {auth["type"]} takes only {sorted(allowed)}')
    if auth["type"] == "basic" and not isinstance(auth.get("username"), str):
        raise BackendConfigError('basic "auth" needs "username" (the password is the secret)')
    if auth["type"] == "header":
        header = auth.get("header")
        if not isinstance(header, str) or not HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS:
            raise BackendConfigError('header "auth" needs "header", the name of the header that carries the secret')
        if not isinstance(auth.get("prefix", ""), str):
            raise BackendConfigError('"auth": "prefix" must be a string')


def check_references(config: dict[str, Any], *, tenant_id: int | None) -> None:
    auth = config.get("auth")
    if isinstance(auth, dict) and auth.get("type") in connections.USER_CREDENTIAL_TYPES:
        connections.UserCredential.parse(auth).check_provider(tenant_id)
        return
    if isinstance(auth, dict) and isinstance(auth.get("secret"), str) and not secret_exists(tenant_id, auth["secret"]):
        scope = "the platform's" if tenant_id is None else "this tenant's"
        raise BackendConfigError(f"there is no secret named {auth['secret']!r} among {scope} secrets")


# --- building the request ---------------------------------------------------------------


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _escape(value: Any) -> str:
    text = _as_text(value)
    if text in (".", ".."):  # would otherwise be resolved as a path step
        return text.replace(".", "%2E")
    return quote(text, safe="")


@dataclass
class _Filler:
    arguments: dict[str, Any]
    used: set[str] = field(default_factory=set)

    def fill(self, template: str, *, escape: bool, where: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.arguments:
                raise ToolError(f"The argument '{name}' is required (the {where} uses it).")
            self.used.add(name)
            value = self.arguments[name]
            return _escape(value) if escape else _as_text(value)

        return PLACEHOLDER.sub(one, template)

    def complete(self, template: str) -> bool:
        return all(name in self.arguments for name in _placeholders(template))

    def body(self, template: Any) -> Any:
        if isinstance(template, str):
            exact = PLACEHOLDER.fullmatch(template)
            if exact and exact.group(1) == "$arguments":
                self.used.update(self.arguments)
                return self.arguments
            if exact:
                self.used.add(exact.group(1))
                return self.arguments.get(exact.group(1))
            return self.fill(template, escape=False, where="body")
        if isinstance(template, list):
            return [self.body(item) for item in template]
        if isinstance(template, dict):
            result = {}
            for key, item in template.items():
                exact = PLACEHOLDER.fullmatch(item) if isinstance(item, str) else None
                if exact and exact.group(1) != "$arguments" and exact.group(1) not in self.arguments:
                    continue  # an optional argument that was not given
                result[key] = self.body(item)
            return result
        return template


def _query_pairs(name: str, value: Any) -> list[tuple[str, str | int | float | bool | None]]:
    if value is None:
        return []
    if isinstance(value, list):
        return [(name, _as_text(item)) for item in value if item is not None]
    return [(name, _as_text(value))]


def _header_value(value: str) -> str:
    if "\r" in value or "\n" in value:
        raise ToolError("A header value may not contain line breaks.")
    return value


class HttpTarget(Protocol):
    """What a request is built from: a tool's, resource's or prompt's settings."""

    @property
    def backend_config(self) -> dict[str, Any]: ...

    @property
    def tenant_id(self) -> int | None: ...

    @property
    def timeout_seconds(self) -> float: ...


@dataclass
class PreparedRequest:
    request: httpx.Request
    secret_headers: set[str]
    secret_values: list[str]


async def prepare(tool: HttpTarget, arguments: dict[str, Any], ctx: CallContext | None = None) -> PreparedRequest:
    config = tool.backend_config
    method = config.get("method", "GET")
    filler = _Filler(arguments)
    template = config["url"]
    split = urlsplit(template)
    base = f"{split.scheme}://{split.netloc}"
    path = filler.fill(split.path, escape=True, where="URL")
    query = filler.fill(split.query, escape=True, where="URL") if split.query else ""
    params: list[tuple[str, str | int | float | bool | None]] = []
    for name, value_template in config.get("query", {}).items():
        if not filler.complete(value_template):
            continue
        exact = PLACEHOLDER.fullmatch(value_template)
        if exact:
            filler.used.add(exact.group(1))
            params += _query_pairs(name, arguments[exact.group(1)])
        else:
            params.append((name, filler.fill(value_template, escape=False, where="query")))
    headers: dict[str, str] = {}
    for name, value_template in config.get("headers", {}).items():
        if filler.complete(value_template):
            headers[name] = _header_value(filler.fill(value_template, escape=False, where="headers"))

    body_mode = config.get("body", "auto")
    content: bytes | None = None
    if isinstance(body_mode, dict):
        content = json.dumps(filler.body(body_mode["template"]), ensure_ascii=False).encode()
    elif body_mode == "auto":
        rest = {name: value for name, value in arguments.items() if name not in filler.used}
        if method in BODY_METHODS:
            content = json.dumps(rest, ensure_ascii=False).encode()
        else:
            for name, value in rest.items():
                params += _query_pairs(name, value)
    if content is not None:
        headers.setdefault("Content-Type", "application/json")
    headers.setdefault("Accept", "application/json, text/*;q=0.9, */*;q=0.8")
    headers.setdefault("User-Agent", "Toolbay")

    secret_headers: set[str] = set()
    secret_values: list[str] = []
    auth = config.get("auth")
    if auth and auth["type"] in connections.USER_CREDENTIAL_TYPES:
        if ctx is None:
            raise BackendError("a user's own credential needs a tool call (a user to act for)")
        token = await connections.UserCredential.parse(auth).token(ctx)
        secret_values.append(token)
        headers["Authorization"] = f"Bearer {token}"
        secret_headers.add("authorization")
    elif auth and auth["type"] == "oauth2_client_credentials":
        token = await client_credentials.access_token(tool.tenant_id, auth)
        secret_values.append(token)
        headers["Authorization"] = f"Bearer {token}"
        secret_headers.add("authorization")
    elif auth:
        try:
            secret = await secret_value(tool.tenant_id, auth["secret"])
        except SecretUnavailable as exc:
            raise BackendError(f"cannot authenticate: {exc}") from None
        secret_values.append(secret)
        if auth["type"] == "bearer":
            header, value = "Authorization", f"Bearer {secret}"
        elif auth["type"] == "basic":
            token = base64.b64encode(f"{auth['username']}:{secret}".encode()).decode("ascii")
            secret_values.append(token)
            header, value = "Authorization", f"Basic {token}"
        else:
            header, value = auth["header"], f"{auth.get('prefix', '')}{secret}"
        headers[header] = value
        secret_headers.add(header.lower())

    assertion = config.get("caller_assertion")
    if assertion is not None:
        if ctx is None:
            raise BackendError("a caller assertion needs a tool call (a caller to vouch for)")
        header = assertion.get("header", ASSERTION_HEADER)
        headers[header] = await connections.caller_assertion(ctx, assertion.get("audience") or base)
        secret_headers.add(header.lower())

    url = httpx.URL(base + (path or "/") + (f"?{query}" if query else ""))
    if params:
        url = url.copy_merge_params(params)
    timeout = float(config.get("timeout_seconds") or tool.timeout_seconds)
    try:
        request = outbound_client().build_request(method, url, headers=headers, content=content, timeout=timeout)
    except httpx.InvalidURL as exc:
        raise ToolError(f"The arguments make an invalid URL: {exc}") from None
    return PreparedRequest(request, secret_headers, secret_values)


# --- sending and reading -----------------------------------------------------------------


@dataclass
class FetchedResponse:
    status: int
    reason: str
    content_type: str
    charset: str
    body: bytes
    url: httpx.URL
    location: str = ""


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The decoded body, or ToolError once it exceeds ``limit`` bytes (the rest is not read)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit and not response.headers.get("content-encoding"):
        raise ToolError(f"The response is too large ({int(declared)} bytes; the limit is {limit} bytes).")
    body = await read_at_most(response, limit)
    if body is None:
        raise ToolError(f"The response is too large (more than the limit of {limit} bytes).")
    return body


async def fetch(prepared: PreparedRequest, *, follow_redirects: bool) -> FetchedResponse:
    """Send, following redirects one by one (each hop vetted again by the transport).

    Raises ToolError for what the tool's configuration or the destination decided, and a
    retryable BackendError for network trouble.
    """
    client = outbound_client()
    request = prepared.request
    first_origin = _origin(request.url)
    limit = settings.TOOLBAY_HTTP_MAX_RESPONSE_BYTES
    hops = 0
    while True:
        response = await (_traced_send(client, request) if tracing.ENABLED else client.send(request, stream=True))
        try:
            redirect = response.next_request if follow_redirects else None
            if redirect is None:
                body = await read_capped(response, limit)
                return FetchedResponse(
                    status=response.status_code,
                    reason=response.reason_phrase,
                    content_type=response.headers.get("content-type", "").split(";")[0].strip().lower(),
                    charset=response.charset_encoding or "utf-8",
                    body=body,
                    url=request.url,
                    location=response.headers.get("location", "") if response.is_redirect else "",
                )
        finally:
            await response.aclose()
        hops += 1
        if hops > settings.TOOLBAY_HTTP_MAX_REDIRECTS:
            raise ToolError(f"Too many redirects (the limit is {settings.TOOLBAY_HTTP_MAX_REDIRECTS}).")
        if redirect.url.scheme not in ("http", "https"):
            raise ToolError(f"Refused a redirect to a {redirect.url.scheme}: URL.")
        if _origin(redirect.url) != first_origin:
            # Credentials are for the configured host only.
            for name in prepared.secret_headers:
                redirect.headers.pop(name, None)
        request = redirect


async def _traced_send(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """One hop as an HTTP CLIENT span, whose ``traceparent`` the API receives."""
    with tracing.span(
        request.method,
        kind=tracing.SpanKind.CLIENT,
        attributes={
            "http.request.method": request.method,
            "server.address": request.url.host,
            "server.port": request.url.port or (443 if request.url.scheme == "https" else 80),
        },
    ) as span:
        tracing.inject(request.headers)  # the API's spans join the call's trace
        response = await client.send(request, stream=True)
        if span is not None:
            span.set_attribute("http.response.status_code", response.status_code)
        return response


def _decode(body: bytes, charset: str) -> str:
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def _trimmed(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_BODY_CHARS else text[:ERROR_BODY_CHARS] + "…"


def _resolve_pointer(value: Any, pointer: str) -> Any:
    for raw in pointer.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise ToolError(f"The response has nothing at {pointer}.")
    return value


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _is_text(content_type: str) -> bool:
    return content_type.startswith("text/") or content_type in TEXT_TYPES or content_type.endswith("+xml")


def to_result(tool: ToolSpec, fetched: FetchedResponse, secrets: list[str]) -> dict[str, Any]:
    ctype = fetched.content_type
    if fetched.location:  # a redirect the tool does not follow: where it points is the answer
        return {"content": [text_block(f"HTTP {fetched.status} {fetched.reason}: redirect to {fetched.location}")]}
    if not 200 <= fetched.status < 300:
        where = fetched.url.copy_with(query=None, fragment=None)
        snippet = redact(_trimmed(_decode(fetched.body, fetched.charset)), secrets)
        message = f"HTTP {fetched.status} {fetched.reason} from {where}" + (f": {snippet}" if snippet else "")
        if fetched.status in RETRYABLE_STATUSES:
            raise BackendError(message, retryable=True)
        return {"content": [text_block(message)], "isError": True}
    if not fetched.body:
        return {"content": [text_block(f"HTTP {fetched.status} {fetched.reason} (empty response)")]}
    pointer = tool.backend_config.get("response", {}).get("pointer", "")
    if _is_json(ctype) or (tool.output_schema is not None and not ctype):
        try:
            value = json.loads(fetched.body)
        except ValueError:
            raise ToolError("The API answered with invalid JSON.") from None
        if pointer:
            value = _resolve_pointer(value, pointer)
        if tool.output_schema is not None:
            if not isinstance(value, dict):
                raise ToolError(
                    f"The API answered with a JSON {type(value).__name__}, but the tool's "
                    "outputSchema describes an object."
                )
            return structured_result(value)
        text = _decode(fetched.body, fetched.charset) if not pointer else json.dumps(value, ensure_ascii=False)
        return {"content": [text_block(text)]}
    if ctype.startswith(("image/", "audio/")):
        kind = "image" if ctype.startswith("image/") else "audio"
        return {"content": [{"type": kind, "data": base64.b64encode(fetched.body).decode("ascii"), "mimeType": ctype}]}
    if _is_text(ctype) or not ctype:
        return {"content": [text_block(_decode(fetched.body, fetched.charset))]}
    blob = base64.b64encode(fetched.body).decode("ascii")
    resource = {"uri": str(fetched.url), "mimeType": ctype, "blob": blob}
    return {"content": [{"type": "resource", "resource": resource}]}


async def _exchange(
    target: HttpTarget, arguments: dict[str, Any], ctx: CallContext | None = None
) -> tuple[FetchedResponse, list[str]]:
    prepared = await prepare(target, arguments, ctx)
    secrets = prepared.secret_values
    timeout = float(target.backend_config.get("timeout_seconds") or target.timeout_seconds)
    try:
        # The whole exchange, redirects and body included, not each read, is bounded.
        async with asyncio.timeout(timeout):
            fetched = await fetch(prepared, follow_redirects=target.backend_config.get("follow_redirects", True))
    except DestinationBlocked as exc:
        raise ToolError(f"The request was refused: {exc}.") from None
    except (TimeoutError, httpx.TimeoutException):
        raise BackendError(f"the HTTP request timed out after {timeout:g} seconds", retryable=True) from None
    except httpx.TransportError as exc:
        host = prepared.request.url.host
        detail = redact(str(exc) or type(exc).__name__, secrets)
        raise BackendError(f"could not reach {host}: {detail}", retryable=True) from None
    return fetched, secrets


async def call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    auth = tool.backend_config.get("auth") or {}
    try:
        fetched, secrets = await _exchange(tool, arguments, ctx)
        if (
            fetched.status == 401
            and auth.get("type") in connections.USER_CREDENTIAL_TYPES
            and await connections.UserCredential.parse(auth).rejected(ctx)
        ):
            # The provider ended the grant, or the token expired early: refreshed (or the
            # connection forgotten, so that the user is asked again); send once more.
            fetched, secrets = await _exchange(tool, arguments, ctx)
        elif fetched.status == 401 and auth.get("type") == "oauth2_client_credentials":
            # Revoked, or expired before its expires_in: a new token, and once more.
            # (The auth's token is the first secret ``prepare`` noted.)
            await client_credentials.token_rejected(tool.tenant_id, auth, secrets[0])
            fetched, secrets = await _exchange(tool, arguments, ctx)
    except connections.ConnectionPending as pending:
        return {"content": [text_block(str(pending))], "isError": True}
    except connections.ProviderMissing as missing:
        return {"content": [text_block(_provider_missing(missing, auth))], "isError": True}
    return to_result(tool, fetched, secrets)


def _provider_missing(missing: connections.ProviderMissing, auth: dict[str, Any]) -> str:
    expected = auth.get("expected_provider") or {}
    command = connections.add_provider_command(missing.provider, missing.tenant_slug, expected)
    return (
        f"This tool acts with each user's own account at the connection provider {missing.provider!r}, which "
        f"is not registered yet, so the tool cannot be used now. An administrator registers it with: {command}"
    )


# --- resources and prompts ----------------------------------------------------------------


async def _fetch_ok(target: HttpTarget, arguments: dict[str, Any]) -> FetchedResponse:
    """The 2xx response; BackendError (with the status and the start of the body) otherwise."""
    try:
        fetched, secrets = await _exchange(target, arguments)
    except ToolError as exc:
        raise BackendError(str(exc)) from None
    if not 200 <= fetched.status < 300 or fetched.location:
        snippet = redact(_trimmed(_decode(fetched.body, fetched.charset)), secrets)
        message = f"HTTP {fetched.status} {fetched.reason}" + (f": {snippet}" if snippet else "")
        raise BackendError(message, retryable=fetched.status in RETRYABLE_STATUSES)
    return fetched


class _Entry(HttpTarget, Protocol):
    @property
    def mime_type(self) -> str: ...


async def read_resource(entry: _Entry, uri: str, variables: dict[str, str]) -> list[dict[str, Any]]:
    fetched = await _fetch_ok(entry, dict(variables))
    mime_type = entry.mime_type or fetched.content_type or "application/octet-stream"
    if _is_text(fetched.content_type) or _is_json(fetched.content_type):
        return [{"uri": uri, "mimeType": mime_type, "text": _decode(fetched.body, fetched.charset)}]
    return [{"uri": uri, "mimeType": mime_type, "blob": base64.b64encode(fetched.body).decode("ascii")}]


async def get_prompt(prompt: HttpTarget, arguments: dict[str, str]) -> dict[str, Any]:
    fetched = await _fetch_ok(prompt, dict(arguments))
    if _is_json(fetched.content_type):
        try:
            value = json.loads(fetched.body)
        except ValueError:
            raise BackendError("the prompt endpoint answered with invalid JSON") from None
        if isinstance(value, list):
            return {"messages": value}
        if isinstance(value, dict) and isinstance(value.get("messages"), list):
            return {key: value[key] for key in ("description", "messages") if key in value}
        raise BackendError('the prompt endpoint must answer {"messages": [...]} or a list of messages')
    text = _decode(fetched.body, fetched.charset)
    return {"messages": [{"role": "user", "content": text_block(text)}]}


class HttpBackend(Backend):
    kind = "http"
    features = frozenset({"resource", "template", "prompt"})

    def validate_config(self, config: dict[str, Any], *, feature: Feature = "tool") -> None:
        validate_config(config)  # one request, whatever it serves

    def check_references(self, config: dict[str, Any], *, tenant_id: int | None, feature: Feature = "tool") -> None:
        check_references(config, tenant_id=tenant_id)

    async def call(self, tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
        return await call(tool, arguments, ctx)

    async def read_resource(
        self, entry: ResourceSpec | TemplateSpec, uri: str, variables: dict[str, str], *, ctx: CallContext | None
    ) -> list[dict[str, Any]]:
        return await read_resource(entry, uri, variables)

    async def get_prompt(
        self, prompt: PromptSpec, arguments: dict[str, str], *, ctx: CallContext | None
    ) -> dict[str, Any]:
        return await get_prompt(prompt, arguments)
