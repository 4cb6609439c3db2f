"""An upstream MCP server behind the test IdP: the official SDK's MCPServer as an OAuth resource
server, whose token verifier introspects every bearer token at the IdP (RFC 7662) with the
server's own client credentials. Its tool ``whoami`` answers with the principal it verified, so a
test sees whose token Toolbay sent. Served by uvicorn in a thread on 127.0.0.1.

It records, per request, the MCP session id and the principal of the token that came with it:
the SDK binds a session to the principal that made it and answers 404 to anyone else, and the
tests check that Toolbay never offered one user's session to another.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from tests.mcp.live import free_port
from tests.poll import wait_for


@dataclass
class Seen:
    """What the upstream verified: one entry per request that carried a token."""

    tokens: list[str] = field(default_factory=list)
    principals: list[dict[str, Any]] = field(default_factory=list)  # introspection answers, active ones
    who: dict[str, str] = field(default_factory=dict)  # token → its sub (or "client:<id>" for a service's)
    sessions: dict[str, set[str]] = field(default_factory=dict)  # Mcp-Session-Id → whom it was used for
    statuses: list[int] = field(default_factory=list)


class IntrospectingVerifier:
    """The SDK's TokenVerifier protocol, by introspection at the IdP. A token meant for another
    audience (one that names an ``aud`` other than this server's) is refused."""

    def __init__(self, introspection_url: str, client: tuple[str, str], audience: str, seen: Seen) -> None:
        self.url = introspection_url
        self.client = client
        self.audience = audience
        self.seen = seen

    async def verify_token(self, token: str) -> AccessToken | None:
        self.seen.tokens.append(token)
        async with httpx.AsyncClient(timeout=10) as http:
            answer = (await http.post(self.url, data={"token": token}, auth=self.client)).json()
        if answer.get("active") is not True:
            return None
        audiences = answer.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else list(audiences or [])
        if audiences and self.audience not in audiences:
            return None
        self.seen.principals.append(answer)
        self.seen.who[token] = str(answer["sub"]) if answer.get("sub") else f"client:{answer.get('client_id')}"
        return AccessToken(
            token=token,
            client_id=str(answer.get("client_id", "")),
            scopes=str(answer.get("scope", "")).split(),
            expires_at=answer.get("exp"),
            subject=answer.get("sub"),
            claims={key: answer[key] for key in ("iss", "aud") if key in answer},
        )


class IdpUpstream:
    def __init__(self, issuer: str, client: tuple[str, str], audience: str) -> None:
        self.port = free_port()
        self.seen = Seen()
        verifier = IntrospectingVerifier(f"{issuer}/token/introspection", client, audience, self.seen)
        self.mcp = MCPServer(
            "idp-protected-upstream",
            log_level="WARNING",
            token_verifier=verifier,
            auth=AuthSettings(issuer_url=issuer, resource_server_url=self.url, validate_token_resource=False),
        )

        @self.mcp.tool(
            description="Who the upstream says the bearer is.", annotations=ToolAnnotations(readOnlyHint=True)
        )
        def whoami() -> str:
            token = get_access_token()
            assert token is not None  # the SDK's bearer middleware let the request in
            claims = token.claims or {}
            return json.dumps({"sub": token.subject, "client_id": token.client_id, "aud": claims.get("aud")})

        app = self.mcp.streamable_http_app(host="127.0.0.1")

        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = dict(scope["headers"])
            session = headers.get(b"mcp-session-id", b"").decode()
            token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")

            async def send_recorded(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    self.seen.statuses.append(message["status"])
                    if session and message["status"] < 400:
                        self.seen.sessions.setdefault(session, set()).add(self.seen.who.get(token, "?"))
                await send(message)

            await app(scope, receive, send_recorded)

        config = uvicorn.Config(recorded, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> IdpUpstream:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("the upstream test server's thread ended")
            return bool(self.server.started)

        wait_for(started, timeout=20, interval=0.02, message="the IdP-protected upstream to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
