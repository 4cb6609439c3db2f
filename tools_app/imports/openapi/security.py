"""``securitySchemes`` → the http backend's ``auth`` of each operation's tool.

Each scheme the document's requirements name is mapped once; each operation then gets the
first scheme of its own requirement (or the document's) that could be mapped, with that
requirement's scopes. What each scheme became, or why it could not, is a note of the preview.

- API key in a header, HTTP bearer and basic: the vault secret ``<source>-<scheme>``. Until it
  exists, the operations are made without it and the note says which secret to store.
- OAuth2 client credentials (Swagger 2.0's ``application`` flow): the tool's own token from the
  flow's ``tokenUrl``, with the client ID given to the import (``client_id``) and the client
  secret in the vault as ``<source>-<scheme>``; until both are there, as for an API key.
- OAuth2 with a user's consent (authorization code, implicit, password) and OpenID Connect:
  each user's own connection (``{"type": "connection"}``), at the provider the import names
  (``connection_provider``), else the one registered under the expected name
  ``<source>-<scheme>``, else the one registered provider whose endpoints or issuer match the
  document's. When none can be told, the tools are never made without auth: they name the
  expected provider and answer an error saying what to register until it is, and the note
  gives the ``add_provider`` command. Several equally good matches are not guessed between
  (a user's token would go to an API it was not issued for).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from tools_app.backends.base import BackendError
from tools_app.backends.connections import add_provider_command, connection_broker
from tools_app.backends.vault import secret_exists
from tools_app.imports.openapi.document import mapping

USER_FLOWS = ("authorizationCode", "implicit", "password")  # OpenAPI 3.x flows a user consents to
SWAGGER_USER_FLOWS = ("accessCode", "implicit", "password")
PROVIDER_NAME_LIMIT = 64  # ConnectionProvider.name


class OptionProblem(ValueError):
    """An import option cannot be used; ``option`` names it (``connection_provider``)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass
class SecurityOptions:
    connection_provider: str = ""  # the provider every user-consent scheme maps to
    client_id: str = ""  # the OAuth client ID of client-credentials schemes


@dataclass
class Where:
    """Where the import's tools live, for the names of secrets and providers it expects."""

    source_name: str
    tenant_id: int | None
    tenant_slug: str
    base_url: str


@dataclass
class SchemeAuth:
    config: dict[str, Any]
    scoped: bool = False  # takes the scopes of the requirement that names it


def secret_name(source_name: str, scheme: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{source_name}-{scheme}")[:100]


def provider_name(source_name: str, scheme: str) -> str:
    """The connection provider name the tools expect when none was named or matched (a slug)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{source_name}-{scheme}").strip("-")
    return slug[:PROVIDER_NAME_LIMIT].rstrip("-") or "api"


def _schemes(document: dict[str, Any], version: str) -> dict[str, Any]:
    if version == "2.0":
        found = document.get("securityDefinitions")
    else:
        components = mapping(document.get("components"))
        found = components.get("securitySchemes")
    return found if isinstance(found, dict) else {}


def _requirements(operation: dict[str, Any], document: dict[str, Any]) -> list[dict[str, Any]]:
    """The operation's alternatives (its own ``security``, else the document's); [] when it
    needs none or authentication is optional (an empty requirement among them)."""
    security = operation.get("security", document.get("security"))
    if not isinstance(security, list) or {} in security:
        return []
    return [requirement for requirement in security if isinstance(requirement, dict)]


def _required_schemes(document: dict[str, Any]) -> list[str]:
    """Scheme names in the order the document's requirements name them (top level first, then
    operations)."""
    names: list[str] = []
    lists: list[Any] = [document.get("security")]
    paths = mapping(document.get("paths"))
    for item in paths.values():
        if isinstance(item, dict):
            lists += [op.get("security") for op in item.values() if isinstance(op, dict)]
    for requirements in lists:
        for requirement in requirements if isinstance(requirements, list) else []:
            for name in requirement if isinstance(requirement, dict) else {}:
                if name not in names:
                    names.append(name)
    return names


def _url(value: Any, base_url: str) -> str:
    """An absolute http(s) URL (relative ones are relative to the server, as OpenAPI says); ""."""
    if not isinstance(value, str) or not value:
        return ""
    url = urljoin(base_url.rstrip("/") + "/", value) if not urlsplit(value).scheme else value
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.hostname and not parts.password else ""


def _user_flow_urls(scheme: dict[str, Any], base_url: str) -> tuple[str, dict[str, str]]:
    """(what it is, where its tokens come from) of a scheme a user consents to; ("", {}) else."""
    if scheme.get("type") == "openIdConnect":
        url = _url(scheme.get("openIdConnectUrl"), base_url)
        return "OpenID Connect", {"openid_connect_url": url} if url else {}
    if scheme.get("type") != "oauth2":
        return "", {}
    flows = mapping(scheme.get("flows"))
    if flows:  # OpenAPI 3.x
        flow_name = next((name for name in USER_FLOWS if isinstance(flows.get(name), dict)), "")
        flow = mapping(flows.get(flow_name))
    else:  # Swagger 2.0: one flow per scheme
        flow_name = str(scheme["flow"]) if scheme.get("flow") in SWAGGER_USER_FLOWS else ""
        flow = scheme
    if not flow_name:
        return "", {}
    urls = {
        "authorization_url": _url(flow.get("authorizationUrl"), base_url),
        "token_url": _url(flow.get("tokenUrl"), base_url),
    }
    return f"OAuth2 ({flow_name})", {key: url for key, url in urls.items() if url}


def _client_credentials_url(scheme: dict[str, Any], base_url: str) -> str | None:
    """The token URL of a client-credentials flow ("" when it has no usable one); None: no such flow."""
    if scheme.get("type") != "oauth2":
        return None
    flows = mapping(scheme.get("flows"))
    if isinstance(flows.get("clientCredentials"), dict):
        return _url(flows["clientCredentials"].get("tokenUrl"), base_url)
    if scheme.get("flow") == "application":
        return _url(scheme.get("tokenUrl"), base_url)
    return None


class SecurityMap:
    """What each scheme of a document became (``notes`` say it), and each operation's auth."""

    def __init__(
        self, document: dict[str, Any], version: str, *, where: Where, options: SecurityOptions | None = None
    ) -> None:
        self.document = document
        self.where = where
        self.options = options or SecurityOptions()
        self.notes: list[str] = []
        self.schemes: dict[str, SchemeAuth] = {}
        if self.options.connection_provider:
            self._check_named_provider(self.options.connection_provider)
        declared = _schemes(document, version)
        for name in _required_schemes(document):
            scheme = declared.get(name)
            if isinstance(scheme, dict):
                mapped = self._map(name, scheme)
                if mapped is not None:
                    self.schemes[name] = mapped

    def for_operation(self, operation: dict[str, Any]) -> dict[str, Any] | None:
        """The ``auth`` of the operation's tool: the first of its schemes that could be mapped."""
        for requirement in _requirements(operation, self.document):
            for name, scopes in requirement.items():
                mapped = self.schemes.get(name)
                if mapped is None:
                    continue
                config = copy.deepcopy(mapped.config)
                listed = scopes if isinstance(scopes, list) and mapped.scoped else []
                wanted = [scope for scope in listed if isinstance(scope, str) and scope]
                if wanted:
                    config["scopes"] = list(dict.fromkeys(wanted))
                return config
        return None

    # --- schemes ---------------------------------------------------------------------------

    def _note(self, scheme: str, text: str) -> None:
        self.notes.append(f"security scheme {scheme!r}: {text}")

    def _check_named_provider(self, name: str) -> None:
        if not self._provider_exists(name):
            scope = "the platform's" if self.where.tenant_id is None else "this tenant's or the platform's"
            raise OptionProblem("connection_provider", f"there is no connection provider named {name!r} among {scope}")

    def _provider_exists(self, name: str) -> bool:
        try:
            return connection_broker().provider_exists(self.where.tenant_id, name)
        except BackendError:  # the oauth app is not installed: no provider exists
            return False

    def _map(self, name: str, scheme: dict[str, Any]) -> SchemeAuth | None:
        kind = scheme.get("type")
        secret = secret_name(self.where.source_name, name)
        token_url = _client_credentials_url(scheme, self.where.base_url)
        what, urls = _user_flow_urls(scheme, self.where.base_url)
        if token_url is not None and (self.options.client_id or not what):
            return self._client_credentials(name, token_url, secret)
        if what:
            return self._connection(name, what, urls)
        if kind == "apiKey":
            where, header = scheme.get("in"), scheme.get("name")
            if where == "header" and isinstance(header, str):
                return self._with_secret(name, {"type": "header", "header": header, "secret": secret})
            self._note(name, f"an API key in the {where} is not supported by the http backend (headers only)")
            return None
        if kind == "basic" or (kind == "http" and str(scheme.get("scheme", "")).lower() == "basic"):
            # The username is not in the document; the admin sets it on the tools.
            self._note(name, "set the basic auth username on the tools")
            return self._with_secret(name, {"type": "basic", "username": "", "secret": secret})
        if kind == "http" and str(scheme.get("scheme", "")).lower() == "bearer":
            return self._with_secret(name, {"type": "bearer", "secret": secret})
        if kind == "oauth2":
            self._note(name, "an OAuth2 scheme without a flow Toolbay can use; its operations are made without it")
            return None
        self._note(name, f"unsupported security scheme type {kind!r}")
        return None

    def _with_secret(self, name: str, config: dict[str, Any], *, scoped: bool = False) -> SchemeAuth | None:
        if not secret_exists(self.where.tenant_id, config["secret"]):
            self._note(
                name,
                f"store the secret {config['secret']!r} in the vault and import again; "
                "its operations are made without auth until then",
            )
            return None
        return SchemeAuth(config, scoped=scoped)

    def _client_credentials(self, name: str, token_url: str, secret: str) -> SchemeAuth | None:
        if not token_url:
            self._note(name, "OAuth2 client credentials without a usable tokenUrl; its operations are made without it")
            return None
        if not self.options.client_id:
            self._note(
                name,
                f"OAuth2 client credentials at {token_url}: give the client ID (--client-id) and store the "
                f"client secret as {secret!r} in the vault, then import again; its operations are made without "
                "auth until then",
            )
            return None
        config = {
            "type": "oauth2_client_credentials",
            "token_url": token_url,
            "client_id": self.options.client_id,
            "secret": secret,
        }
        mapped = self._with_secret(name, config, scoped=True)
        if mapped is not None:
            self._note(name, f"OAuth2 client credentials: tokens from {token_url} for client {config['client_id']!r}")
        return mapped

    def _connection(self, name: str, what: str, urls: dict[str, str]) -> SchemeAuth:
        expected = provider_name(self.where.source_name, name)
        chosen, how = self.options.connection_provider, "as the import asked"
        if not chosen and self._provider_exists(expected):
            chosen, how = expected, "registered under the expected name"
        matches: list[str] = []
        if not chosen and urls:
            try:
                matches = connection_broker().providers_matching(self.where.tenant_id, urls)
            except BackendError:
                matches = []
            if len(matches) == 1:
                chosen, how = matches[0], "its endpoints or issuer match the document's"
        # Kept whether or not the provider exists (so that registering it changes no tool), also
        # empty when the document's URLs are unusable: it lets the catalog accept a provider
        # that is not registered yet.
        config: dict[str, Any] = {"type": "connection", "provider": chosen or expected, "expected_provider": urls}
        if chosen:
            self._note(name, f"{what}: each user's own account at connection provider {chosen!r} ({how})")
            return SchemeAuth(config, scoped=True)
        command = add_provider_command(expected, self.where.tenant_slug, urls)
        several = f"several connection providers match ({', '.join(matches)}), so none is chosen; " if matches else ""
        self._note(
            name,
            f"{what}: {several}no connection provider is registered for it. The tools need each user's own "
            f"account at provider {expected!r} and answer an error until it exists (name one with "
            f"--connection-provider, or register it: {command}; the redirect URI it prints goes to the provider)",
        )
        return SchemeAuth(config, scoped=True)
