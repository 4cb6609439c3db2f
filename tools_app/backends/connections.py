"""Per-user credentials for backends: the seam through which a backend asks for the calling
user's token at a provider, without knowing how connections are made.

``oauth.connections`` installs the broker (``use_broker``) when Django starts, the way
``oauth`` installs its token check into ``tenants.auth``. A backend calls
``connection_broker().access_token(...)``; a user who has no usable connection raises
``ConnectionRequired`` with the link that makes one, which the backend turns into a URL-mode
elicitation, a -32042 error or an ``isError`` result (``ask_to_connect``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from mcp_platform.mcp.jsonrpc import JsonRpcError
from tools_app.backends.base import BackendConfigError, BackendError, CallContext

# MCP 2025-11-25: URLElicitationRequiredError (retired in 2026-07-28, where the client retries).
URL_ELICITATION_REQUIRED = -32042


@dataclass(frozen=True)
class Caller:
    """Who a connection belongs to: the principal's stable subject, its tenant, and a label."""

    tenant_id: int
    subject: str
    label: str = ""
    key_id: int | None = None
    oauth_subject: str = ""
    grant_id: str = ""
    oauth_issuer: str = ""
    bearer: str = field(default="", repr=False, compare=False)  # for token exchange only


@dataclass(frozen=True)
class Token:
    """A connection's access token, and what the call's audit row says about it."""

    value: str
    connection: str  # "<provider>#<connection id> <account>": no secret


class ProviderMissing(BackendError):
    """No connection provider of that name is registered for the caller's tenant or the platform."""

    def __init__(self, provider: str, tenant_slug: str = "") -> None:
        super().__init__(f"there is no connection provider named {provider!r}")
        self.provider = provider
        self.tenant_slug = tenant_slug


def add_provider_command(provider: str, tenant_slug: str, expected: dict[str, str]) -> str:
    """The ``add_provider`` command that registers ``provider`` at the endpoints an API
    description expects (``expected``: authorization_url, token_url, openid_connect_url)."""
    words = ["python manage.py add_provider", provider]
    words += ["--tenant", tenant_slug] if tenant_slug else []
    discovery = "/.well-known/openid-configuration"
    if expected.get("openid_connect_url", "").endswith(discovery):
        words += ["--issuer", expected["openid_connect_url"].removesuffix(discovery)]
    elif expected.get("authorization_url") and expected.get("token_url"):
        words += ["--authorization-endpoint", expected["authorization_url"], "--token-endpoint", expected["token_url"]]
    else:
        words += ["--issuer", "ISSUER_URL"]
    return " ".join([*words, "--client-id", "CLIENT_ID", "--client-secret-env", "VARIABLE_HOLDING_THE_SECRET"])


class ConnectionRequired(Exception):
    """The caller has no usable connection to ``provider``; ``url`` opens Toolbay's connect
    page for them (it carries no credential: completing it needs the caller's own sign-in)."""

    def __init__(self, provider: str, display_name: str, url: str, elicitation_id: str) -> None:
        super().__init__(f"no connection to {provider}")
        self.provider = provider
        self.display_name = display_name
        self.url = url
        self.elicitation_id = elicitation_id

    @property
    def message(self) -> str:
        return (
            f"This tool acts with your own {self.display_name} account, which is not connected yet. "
            f"Open {self.url} to connect it, then call the tool again."
        )


class ConnectionBroker(Protocol):
    async def access_token(
        self, caller: Caller, provider: str, scopes: list[str], *, call_id: str = "", session_id: str = ""
    ) -> Token:
        """A valid access token of ``caller``'s connection (refreshed first when it is about
        to expire); raises ConnectionRequired, ProviderMissing, or BackendError when the
        provider fails. ``session_id``: the MCP session that will be told
        (``notifications/elicitation/complete``) once the connect link it gets is completed."""

    async def is_connected(self, caller: Caller, provider: str) -> bool:
        """Whether the caller has a connection now (after they followed a connect link)."""

    async def token_rejected(self, caller: Caller, provider: str) -> None:
        """The API answered 401 to the token: refresh it, or forget the connection."""

    def provider_exists(self, tenant_id: int | None, provider: str) -> bool: ...

    def providers_matching(self, tenant_id: int | None, urls: dict[str, str]) -> list[str]:
        """Names of the providers the tenant's tools may use (its own first, then the
        platform's) that issue tokens where an API description says (``urls``:
        authorization_url, token_url, openid_connect_url), best match first."""

    async def exchanged_token(self, caller: Caller, provider: str, audience: str, scopes: list[str]) -> Token:
        """RFC 8693: the caller's own token exchanged at its issuer for one for ``audience``."""


class CallerAsserter(Protocol):
    async def assertion(self, caller: Caller, *, tool: str, call_id: str, audience: str) -> str:
        """A short-lived JWT saying who calls (tenant, subject, tool, call id) for ``audience``,
        signed with the tenant's key (published at ``/connect/<tenant>/jwks``)."""


_broker: ConnectionBroker | None = None
_asserter: CallerAsserter | None = None


def use_asserter(asserter: CallerAsserter | None) -> None:
    global _asserter
    _asserter = asserter


async def caller_assertion(ctx: CallContext, audience: str) -> str:
    if _asserter is None:
        raise BackendError("signed caller assertions are not available (the oauth app is not installed)")
    return await _asserter.assertion(
        caller_of(ctx), tool=ctx.tool_name, call_id=str(getattr(ctx, "call_id", "")), audience=audience
    )


def use_broker(broker: ConnectionBroker | None) -> None:
    global _broker
    _broker = broker


def connection_broker() -> ConnectionBroker:
    if _broker is None:
        raise BackendError("per-user connections are not available (the oauth app is not installed)")
    return _broker


def caller_of(ctx: CallContext) -> Caller:
    caller: Any = getattr(ctx, "connection_caller", None)
    if not isinstance(caller, Caller):
        raise BackendError("this call has no identified user to act for")
    return caller


async def token_for(ctx: CallContext, provider: str, scopes: list[str]) -> str:
    """The caller's token at ``provider``; when there is none, asks the user to connect
    (URL-mode elicitation where the client can follow a link, and the call goes on once the
    connection exists), or ends the call with the link (-32042, or an ``isError`` text)."""
    broker = connection_broker()
    caller = caller_of(ctx)
    call_id = str(getattr(ctx, "call_id", ""))
    session_id = ctx.elicitation_session() if hasattr(ctx, "elicitation_session") else ""
    try:
        token = await broker.access_token(caller, provider, scopes, call_id=call_id, session_id=session_id)
    except ConnectionRequired as needed:
        await ask_to_connect(ctx, needed)
        if not await broker.is_connected(caller, provider):
            raise ConnectionPending(needed.message) from None
        token = await broker.access_token(caller, provider, scopes, call_id=call_id)
    if hasattr(ctx, "connection_used"):
        ctx.connection_used = token.connection
    return token.value


async def exchanged_token_for(ctx: CallContext, provider: str, audience: str, scopes: list[str]) -> str:
    """A token for ``audience`` obtained by RFC 8693 token exchange for the caller's own token."""
    token = await connection_broker().exchanged_token(caller_of(ctx), provider, audience, scopes)
    if hasattr(ctx, "connection_used"):
        ctx.connection_used = token.connection
    return token.value


async def token_rejected(ctx: CallContext, provider: str) -> None:
    await connection_broker().token_rejected(caller_of(ctx), provider)


class ConnectionPending(Exception):
    """The user was asked to connect and has not (yet): the message tells the model so."""


async def ask_to_connect(ctx: CallContext, needed: ConnectionRequired) -> None:
    """Ask through the best channel the client offers; returns once the user answered a
    URL-mode elicitation, or raises (JsonRpcError -32042 or ConnectionPending) otherwise."""
    params = {
        "mode": "url",
        "message": f"Connect your {needed.display_name} account so that this tool can act for you.",
        "url": needed.url,
        "elicitationId": needed.elicitation_id,
    }
    mode = ctx.url_elicitation() if hasattr(ctx, "url_elicitation") else "none"
    if mode == "request":
        answer = await ctx.elicit_url(params, key=f"connect-{needed.provider}")  # type: ignore[attr-defined]
        if answer.get("action") != "accept":
            raise ConnectionPending(
                f"The user did not connect their {needed.display_name} account (they answered "
                f"{answer.get('action', 'nothing')!r}). They can do it at {needed.url} and call the tool again."
            )
        return
    if mode == "error":
        raise JsonRpcError(URL_ELICITATION_REQUIRED, needed.message, data={"elicitations": [params]})
    raise ConnectionPending(needed.message)


# --- per-user credentials, as a backend's settings name them ------------------------------------

USER_CREDENTIAL_TYPES = ("connection", "token_exchange")
EXPECTED_PROVIDER_KEYS = ("authorization_url", "token_url", "openid_connect_url")


def is_web_url(url: str) -> bool:
    """An http(s) URL with a host and no credentials in it."""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not (parts.username or parts.password)


@dataclass(frozen=True)
class UserCredential:
    """A credential that is the calling user's own, not the tenant's: their connection at a
    provider (``{"type": "connection", "provider": NAME, "scopes": [...]}``), or a token obtained
    by RFC 8693 token exchange for their own OAuth token (``{"type": "token_exchange",
    "provider": NAME, "audience": URL, "scopes": [...]}``). The same shape serves an HTTP tool's
    ``auth`` and an upstream MCP server's ``user_credential``."""

    type: str
    provider: str
    scopes: tuple[str, ...] = ()
    audience: str = ""
    # What an imported API description expects the provider to be (its authorization, token or
    # discovery URLs), set by the OpenAPI importer when no registered provider matched: the
    # provider may be registered later, and until then a call says what to register.
    expected_provider: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def parse(cls, value: Any, *, what: str = '"auth"') -> UserCredential:
        """Raises BackendConfigError, saying what is wrong, on a bad shape."""
        if not isinstance(value, dict) or value.get("type") not in USER_CREDENTIAL_TYPES:
            raise BackendConfigError(
                f'{what} must be {{"type": "connection", "provider": "<name>", "scopes": [...]}} or '
                f'{{"type": "token_exchange", "provider": "<name>", "audience": "<url>", "scopes": [...]}}'
            )
        kind = value["type"]
        allowed = {"type", "provider", "scopes"} | ({"audience"} if kind == "token_exchange" else {"expected_provider"})
        if set(value) - allowed:
            raise BackendConfigError(f"{what} of type {kind} takes only {sorted(allowed - {'type'})}")
        if not isinstance(value.get("provider"), str) or not value["provider"]:
            raise BackendConfigError(f'{what} of type {kind} needs "provider": the name of a connection provider')
        if kind == "token_exchange" and (not isinstance(value.get("audience"), str) or not value["audience"]):
            raise BackendConfigError(f'{what} of type token_exchange needs "audience": the API the token is for')
        scopes = value.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(scope, str) and scope for scope in scopes):
            raise BackendConfigError(f'{what}: "scopes" must be a list of scope strings')
        expected = value.get("expected_provider")
        if expected is not None and not (
            isinstance(expected, dict)
            and all(
                key in EXPECTED_PROVIDER_KEYS and isinstance(url, str) and is_web_url(url)
                for key, url in expected.items()
            )
        ):
            keys = ", ".join(EXPECTED_PROVIDER_KEYS)
            raise BackendConfigError(f'{what}: "expected_provider" maps {keys} to http(s) URLs')
        return cls(
            kind,
            value["provider"],
            tuple(scopes),
            value.get("audience", ""),
            None if expected is None else tuple(sorted(expected.items())),
        )

    def check_provider(self, tenant_id: int | None) -> None:
        """Raises BackendConfigError when the tenant (or the platform) has no such provider
        (unless an import expects it to be registered later)."""
        if self.expected_provider is not None:
            return
        if not connection_broker().provider_exists(tenant_id, self.provider):
            scope = "the platform's" if tenant_id is None else "this tenant's"
            raise BackendConfigError(f"there is no connection provider named {self.provider!r} among {scope}")

    async def token(self, ctx: CallContext) -> str:
        """The caller's token for this credential (asking them to connect when they have no
        connection: see ``token_for``); raises ConnectionPending, JsonRpcError or BackendError."""
        if self.type == "connection":
            return await token_for(ctx, self.provider, list(self.scopes))
        return await exchanged_token_for(ctx, self.provider, self.audience, list(self.scopes))

    async def rejected(self, ctx: CallContext) -> bool:
        """The API answered 401 to the token: True when asking again may help (a connection's
        token is refreshed, or the connection forgotten so that the user is asked again)."""
        if self.type != "connection":
            return False
        await token_rejected(ctx, self.provider)
        return True
