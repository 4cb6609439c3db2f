"""Reading a server's entry of the official MCP registry (``server.json``) into the settings of
a packaged server: the first npm or PyPI package with the stdio transport (else the first
streamable-http remote), its exact version, its arguments (positional and named, values given
or defaulted) and the environment values it declares (plain ones with their value or default;
secret ones are left for the admin to map to a tenant secret, and listed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = {"npm": "npm", "pypi": "pypi"}


class RegistryProblem(Exception):
    """The document cannot be turned into a server; the message says why."""


@dataclass
class RegistryServer:
    fields: dict[str, Any]
    secret_variables: list[str] = field(default_factory=list)
    required_variables: list[str] = field(default_factory=list)
    description: str = ""


def _get(item: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    return item.get(camel, item.get(snake, default))


def _arguments(package: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for argument in _get(package, "packageArguments", "package_arguments", []) or []:
        if not isinstance(argument, dict):
            continue
        value = argument.get("value", argument.get("default"))
        if argument.get("type") == "named":
            name = argument.get("name")
            if not isinstance(name, str) or not name:
                continue
            argv.append(name)
            if value is not None:
                argv.append(str(value))
        elif value is not None:
            argv.append(str(value))
        elif _get(argument, "isRequired", "is_required", False):
            raise RegistryProblem(f"the package argument {argument.get('valueHint') or '?'} has no value or default")
    return argv


def read_server_json(document: Any) -> RegistryServer:
    if not isinstance(document, dict):
        raise RegistryProblem("a server.json is a JSON object")
    description = str(document.get("description") or "")
    for package in document.get("packages") or []:
        if not isinstance(package, dict):
            continue
        registry = _get(package, "registryType", "registry_type") or package.get("registry_name")
        kind = KINDS.get(str(registry).lower())
        transport = package.get("transport") or {"type": "stdio"}
        if kind is None or (isinstance(transport, dict) and transport.get("type", "stdio") != "stdio"):
            continue
        name = package.get("identifier") or package.get("name")
        version = package.get("version") or document.get("version")
        if not isinstance(name, str) or not isinstance(version, str):
            raise RegistryProblem("the package names no identifier or version")
        env: dict[str, str] = {}
        secrets: list[str] = []
        required: list[str] = []
        for variable in _get(package, "environmentVariables", "environment_variables", []) or []:
            if not isinstance(variable, dict) or not isinstance(variable.get("name"), str):
                continue
            var_name = variable["name"]
            if _get(variable, "isSecret", "is_secret", False):
                secrets.append(var_name)
                if _get(variable, "isRequired", "is_required", False):
                    required.append(var_name)
                continue
            value = variable.get("value", variable.get("default"))
            if value is not None:
                env[var_name] = str(value)
            elif _get(variable, "isRequired", "is_required", False):
                required.append(var_name)
        return RegistryServer(
            fields={"kind": kind, "package": name, "version": version, "args": _arguments(package), "env": env},
            secret_variables=secrets,
            required_variables=required,
            description=description,
        )
    for remote in document.get("remotes") or []:
        if isinstance(remote, dict) and remote.get("type") == "streamable-http" and isinstance(remote.get("url"), str):
            return RegistryServer(fields={"kind": "http", "url": remote["url"]}, description=description)
    raise RegistryProblem(
        "the server.json offers no npm or PyPI package with the stdio transport, nor a Streamable HTTP remote"
    )
