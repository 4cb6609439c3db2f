"""``securitySchemes`` → the http backend's ``auth``, with the secret in the vault.

The secret of scheme ``S`` imported as source ``N`` is named ``N-S`` (in the tool's catalog).
When it exists the tools use it; when it does not, the tools are made without auth and the
preview says which secret to store (then import again). What the http backend cannot send
yet is said, not guessed: API keys in a query or cookie, OAuth2 client credentials (no token
exchange in the backend), and OAuth2 authorization code / OpenID Connect, which need the
per-user connections issue.
"""

from __future__ import annotations

import re
from typing import Any

from tools_app.backends.vault import secret_exists
from tools_app.imports.openapi.document import mapping


def secret_name(source_name: str, scheme: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{source_name}-{scheme}")[:100]


def _schemes(document: dict[str, Any], version: str) -> dict[str, Any]:
    if version == "2.0":
        found = document.get("securityDefinitions")
    else:
        components = mapping(document.get("components"))
        found = components.get("securitySchemes")
    return found if isinstance(found, dict) else {}


def _required_schemes(document: dict[str, Any]) -> list[str]:
    """Scheme names in the order the document's requirements name them (top level first, then
    operations), so the scheme most operations use comes first."""
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


def _backend_auth(scheme: dict[str, Any], secret: str, version: str) -> tuple[dict[str, Any] | None, str]:
    kind = scheme.get("type")
    if kind == "apiKey":
        where, header = scheme.get("in"), scheme.get("name")
        if where == "header" and isinstance(header, str):
            if header.lower() == "authorization":
                return {"type": "header", "header": "Authorization", "secret": secret}, ""
            return {"type": "header", "header": header, "secret": secret}, ""
        return None, f"an API key in the {where} is not supported by the http backend (headers only)"
    if kind == "basic" or (kind == "http" and str(scheme.get("scheme", "")).lower() == "basic"):
        # The username is not in the document; the admin sets it on the tools' auth.
        return {"type": "basic", "username": "", "secret": secret}, "set the basic auth username on the tools"
    if kind == "http" and str(scheme.get("scheme", "")).lower() == "bearer":
        return {"type": "bearer", "secret": secret}, ""
    if kind == "oauth2":
        flows = mapping(scheme.get("flows"))
        if "clientCredentials" in flows or scheme.get("flow") == "application":
            return None, (
                "OAuth2 client credentials are not supported by the http backend yet; store a token as "
                f"secret {secret!r} and set bearer auth on the tools"
            )
        return None, "OAuth2 with a user's consent needs per-user connections (not built yet); tools made without auth"
    if kind == "openIdConnect":
        return None, "OpenID Connect needs per-user connections (not built yet); tools made without auth"
    return None, f"unsupported security scheme type {kind!r}"


def map_security(
    document: dict[str, Any], version: str, *, source_name: str, tenant_id: int | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """The ``auth`` the tools get (None: none) and notes for the preview."""
    schemes = _schemes(document, version)
    notes: list[str] = []
    for name in _required_schemes(document):
        scheme = schemes.get(name)
        if not isinstance(scheme, dict):
            continue
        secret = secret_name(source_name, name)
        config, note = _backend_auth(scheme, secret, version)
        if config is None:
            notes.append(f"security scheme {name!r}: {note}")
            continue
        if note:
            notes.append(f"security scheme {name!r}: {note}")
        if not secret_exists(tenant_id, secret):
            notes.append(
                f"security scheme {name!r}: store the secret {secret!r} in the vault and import again; "
                "tools made without auth"
            )
            return None, notes
        return config, notes
    return None, notes
