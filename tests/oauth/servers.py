"""Local stand-ins for the outside world of OAuth: an external issuer (its own key pair,
served as OIDC metadata and a JWKS) and an HTTPS server for client ID metadata documents
(a self-signed certificate the live Toolbay server is told to trust)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey, generate_key

from tests.certificates import throwaway_certificate


class _Server:
    def __init__(
        self,
        routes: Callable[[str], tuple[int, Any]],
        tls: ssl.SSLContext | None = None,
        posts: Callable[[str, bytes, str], tuple[int, Any]] | None = None,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                self._answer(*routes(self.path))

            def do_POST(self) -> None:
                outer.hits.append(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._answer(*(posts(self.path, body, self.headers.get("Authorization", "")) if posts else (404, {})))

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.hits: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


INTROSPECTION_CLIENT = "toolbay-rs:rs-secret"


class ExternalIssuer:
    """An authorization server Toolbay does not run: OIDC discovery and a JWKS on loopback,
    and tokens signed with its own RSA key."""

    def __init__(self) -> None:
        self.key: RSAKey = generate_key("RSA", 2048, parameters={"alg": "RS256", "use": "sig"}, auto_kid=True)
        # Opaque tokens its introspection endpoint knows: token -> RFC 7662 answer.
        self.opaque: dict[str, dict[str, Any]] = {}
        self.server = _Server(self._route, posts=self._introspect)
        self.url = f"http://127.0.0.1:{self.server.port}/realms/test"

    def _introspect(self, path: str, body: bytes, authorization: str) -> tuple[int, Any]:
        from base64 import b64encode
        from urllib.parse import parse_qs

        if path != "/realms/test/introspect":
            return 404, {}
        if authorization != "Basic " + b64encode(INTROSPECTION_CLIENT.encode()).decode():
            return 401, {"error": "invalid_client"}
        token = parse_qs(body.decode()).get("token", [""])[0]
        return 200, self.opaque.get(token, {"active": False})

    def _route(self, path: str) -> tuple[int, Any]:
        if path == "/realms/test/.well-known/openid-configuration":
            return 200, {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/a",
                "introspection_endpoint": f"{self.url}/introspect",
            }
        if path == "/realms/test/jwks":
            return 200, {"keys": [self.key.as_dict(private=False)]}
        return 404, {"error": "not found"}

    def mint(
        self,
        *,
        audience: str,
        subject: str = "ext-user",
        scope: str = "tools:list tools:call",
        expires_in: int = 300,
        issuer: str | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {
            "iss": issuer or self.url,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "exp": now + expires_in,
            "scope": scope,
            "azp": "ext-client",
            **claims,
        }
        return jwt.encode({"alg": "RS256", "kid": self.key.kid, "typ": "at+jwt"}, payload, KeySet([self.key]))

    def stop(self) -> None:
        self.server.stop()


class MetadataDocumentHost:
    """HTTPS on loopback serving client ID metadata documents (``documents[path] = {...}``)."""

    def __init__(self, directory: Path) -> None:
        self.cert_path, key_path = throwaway_certificate(directory, "127.0.0.1", stem="cimd-")
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(self.cert_path, key_path)
        self.documents: dict[str, dict[str, Any]] = {}
        self.server = _Server(lambda path: (200, self.documents[path]) if path in self.documents else (404, {}), tls)
        self.origin = f"https://127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        self.server.stop()
