"""The operations of a document, each turned into the fields of one ``http`` tool (or the
reason it cannot be one).

A tool's arguments are the operation's path, query, header and cookie parameters (renamed
when two share a name or a name is no valid placeholder) and its JSON request body: the
body's properties as arguments when they are plain names that clash with nothing, else one
``body`` argument. ``additionalProperties: false`` makes the engine refuse unknown arguments
before the API is called.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from tools_app.backends.http.backend import HEADER_NAME, RESERVED_HEADERS
from tools_app.backends.http.backend import METHODS as HTTP_METHODS
from tools_app.imports.openapi.document import (
    METHODS,
    DocumentProblem,
    StructureCheck,
    listing,
    mapping,
    place_of,
    text,
)
from tools_app.imports.openapi.schemas import Path, SchemaConverter

NAME_LIMIT = 128
ARGUMENT = re.compile(r"^[A-Za-z0-9_.-]+$")
# Request headers HTTP itself or the http backend sets; an operation declaring them is ignored there
# (OpenAPI says the same of Accept, Content-Type and Authorization).
IGNORED_HEADERS = {"accept", "content-type", "authorization", *RESERVED_HEADERS}
READ_ONLY_METHODS = {"get", "head", "options", "trace"}
# RFC 9110: GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent; the engine retries those.
IDEMPOTENT_METHODS = {"get", "head", "options", "trace", "put", "delete"}
BODY_METHODS = {"post", "put", "patch"}


@dataclass
class Selection:
    """Which operations to import: all by default; each given list narrows (any of its items)."""

    operation_ids: Sequence[str] = ()
    tags: Sequence[str] = ()
    paths: Sequence[str] = ()  # globs on the path template, e.g. /pets/*

    def picks(self, operation: dict[str, Any], path: str) -> bool:
        if self.operation_ids and operation.get("operationId") not in self.operation_ids:
            return False
        tags = listing(operation.get("tags"))
        if self.tags and not set(self.tags) & set(tags):
            return False
        return not self.paths or any(fnmatch.fnmatchcase(path, glob) for glob in self.paths)


@dataclass
class ToolDraft:
    """One operation as a tool: the ``Tool`` fields, and the operation as the document has it."""

    operation: str  # "GET /pets/{id}": the operation's identity across re-imports
    operation_id: str
    fields: dict[str, Any]
    source: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.fields["name"])


@dataclass
class SkippedOperation:
    operation: str
    reason: str  # starts with the place in the document


class OperationAuth(Protocol):
    """How each operation's tool authenticates (``security.SecurityMap``)."""

    def for_operation(self, operation: dict[str, Any]) -> dict[str, Any] | None:
        """The backend's ``auth`` for the operation; None: none."""


def server_url(document: dict[str, Any], version: str, fetched_from: str) -> str:
    """The document's first server (variables at their defaults), absolute; "" when there is none."""
    if version == "2.0":
        host = document.get("host")
        base_path = text(document.get("basePath"))
        schemes = listing(document.get("schemes"))
        if isinstance(host, str) and host:
            scheme = "https" if "https" in schemes or not schemes else str(schemes[0])
            return f"{scheme}://{host}{base_path}"
        url = base_path or "/"
    else:
        servers = document.get("servers")
        if not (isinstance(servers, list) and servers and isinstance(servers[0], dict)):
            url = "/"
        else:
            server = servers[0]
            url = str(server.get("url", "/"))
            variables = mapping(server.get("variables"))
            for name, variable in variables.items():
                if isinstance(variable, dict) and "default" in variable:
                    url = url.replace("{" + name + "}", str(variable["default"]))
    if urlsplit(url).scheme in ("http", "https"):
        return url
    return urljoin(fetched_from, url) if fetched_from.startswith(("http://", "https://")) else ""


def tool_name(raw: str, prefix: str, taken: set[str]) -> str:
    """A valid tool name (``^[A-Za-z0-9_.-]{1,128}$``) unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", raw).strip("_") or "operation"
    name = (prefix + base)[:NAME_LIMIT]
    number = 1
    while name.lower() in taken:
        number += 1
        suffix = f"_{number}"
        name = (prefix + base)[: NAME_LIMIT - len(suffix)] + suffix
    taken.add(name.lower())
    return name


def _argument_name(raw: str, where: str, used: set[str]) -> str:
    name = raw if ARGUMENT.match(raw) else (re.sub(r"[^A-Za-z0-9_.-]+", "_", raw).strip("_") or where)
    if name in used:
        name = f"{name}_{where}"
    number = 1
    candidate = name
    while candidate in used:
        number += 1
        candidate = f"{name}_{number}"
    used.add(candidate)
    return candidate


def _json_media(content: Any) -> tuple[str, Any] | None:
    """The JSON media type of a ``content`` map and its entry, preferring application/json."""
    if not isinstance(content, dict):
        return None
    for media, entry in content.items():
        base = media.split(";")[0].strip().lower()
        if base == "application/json" and isinstance(entry, dict):
            return media, entry
    for media, entry in content.items():
        base = media.split(";")[0].strip().lower()
        if base.endswith("+json") and isinstance(entry, dict):
            return media, entry
    for media, entry in content.items():  # "anything" takes JSON too
        if media.split(";")[0].strip() in ("*/*", "application/*") and isinstance(entry, dict):
            return media, entry
    return None


def _described(schema: Any, parameter: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        return schema
    extra: dict[str, Any] = {}
    if isinstance(parameter.get("description"), str) and "description" not in schema:
        extra["description"] = parameter["description"]
    if parameter.get("deprecated") is True:
        extra["deprecated"] = True
    if "example" in parameter and "examples" not in schema:
        extra["examples"] = [parameter["example"]]
    if not extra:
        return schema
    # Beside a reference these keywords are fine in 2020-12.
    return {**schema, **extra}


SWAGGER_PARAMETER_KEYS = {"name", "in", "required", "description", "collectionFormat", "allowEmptyValue", "schema"}


class OperationReader:
    """Turns a document's operations into tool drafts."""

    def __init__(
        self,
        document: dict[str, Any],
        version: str,
        *,
        base_url: str,
        prefix: str,
        auth: OperationAuth,
        structure: StructureCheck,
    ) -> None:
        self.document = document
        self.version = version
        self.base_url = base_url.rstrip("/")
        self.prefix = prefix
        self.auth = auth
        self.structure = structure
        self.schemas = SchemaConverter(document, version)

    def operations(self, selection: Selection) -> list[tuple[str, str, dict[str, Any], Path]]:
        """(method, path, operation, place) of the selected operations, in document order."""
        paths = mapping(self.document.get("paths"))
        found: list[tuple[str, str, dict[str, Any], Path]] = []
        for path, item in paths.items():
            if not isinstance(item, dict):
                continue
            for method in METHODS:
                operation = item.get(method)
                if isinstance(operation, dict) and selection.picks(operation, path):
                    found.append((method, path, operation, ("paths", path, method)))
        return found

    def draft(self, method: str, path: str, operation: dict[str, Any], taken: set[str]) -> ToolDraft:
        """The tool for one operation; DocumentProblem (naming the place) when it cannot be one."""
        place: Path = ("paths", path, method)
        problem = self.structure.per_operation.get((path, method)) or self.structure.per_operation.get((path, "*"))
        if problem:
            raise DocumentProblem("", problem)
        label = f"{method.upper()} {path}"
        if method.upper() not in HTTP_METHODS:
            raise DocumentProblem(place_of(place), f"the http backend does not send {method.upper()} requests")
        path_item = self.document["paths"][path]
        used: set[str] = set()
        properties: dict[str, Any] = {}
        required: list[str] = []
        refs: set[str] = set()
        config: dict[str, Any] = {"method": method.upper()}
        query: dict[str, str] = {}
        headers: dict[str, str] = {}
        cookies: list[tuple[str, str]] = []
        notes: list[str] = []
        url_path = path

        for parameter, parameter_place in self._parameters(path_item, operation, place):
            name = parameter.get("name")
            where = parameter.get("in")
            if not isinstance(name, str) or where not in ("path", "query", "header", "cookie", "body", "formData"):
                raise DocumentProblem(place_of(parameter_place), "a parameter needs a name and a place (in)")
            if where == "body":  # Swagger 2.0's body parameter is the request body
                continue
            if where == "formData":
                if parameter.get("required") is True:
                    raise DocumentProblem(
                        place_of(parameter_place), "form parameters are not supported: the http backend sends JSON"
                    )
                notes.append(f"{place_of(parameter_place)}: optional form parameter {name!r} left out")
                continue
            if where == "header" and name.lower() in IGNORED_HEADERS:
                continue
            if where == "header" and not HEADER_NAME.match(name):
                if parameter.get("required") is True:
                    raise DocumentProblem(place_of(parameter_place), f"{name!r} is no valid header name")
                continue
            schema, schema_refs = self._parameter_schema(parameter, parameter_place)
            refs |= schema_refs
            argument = _argument_name(name, where, used)
            properties[argument] = _described(schema, parameter)
            if parameter.get("required") is True or where == "path":
                required.append(argument)
            if where == "path":
                if "{" + name + "}" not in url_path:
                    raise DocumentProblem(
                        place_of(parameter_place), f"the path parameter {name!r} is not in the path {path!r}"
                    )
                url_path = url_path.replace("{" + name + "}", "{" + argument + "}")
            elif where == "query":
                query[name] = "{" + argument + "}"
            elif where == "header":
                headers[name] = "{" + argument + "}"
            else:
                cookies.append((name, argument))
        leftover = re.findall(r"\{([^}]*)\}", url_path)
        unknown = [item for item in leftover if item not in properties]
        if unknown:
            raise DocumentProblem(
                place_of(place), f"the path {path!r} uses {unknown[0]!r}, which no parameter declares"
            )
        if cookies:
            # One Cookie header: the backend sends it only when every cookie argument is given.
            headers["Cookie"] = "; ".join(f"{name}={{{argument}}}" for name, argument in cookies)
        body = self._body(operation, place, method, used, properties, required, refs, notes)
        config["url"] = self.base_url + url_path
        if query:
            config["query"] = query
        if headers:
            config["headers"] = headers
        config["body"] = body if body is not None else "none"
        auth = self.auth.for_operation(operation)
        if auth is not None:
            config["auth"] = auth

        input_schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            input_schema["required"] = list(dict.fromkeys(required))
        input_schema["additionalProperties"] = False
        if refs:
            input_schema["$defs"] = self.schemas.definitions(refs)
        output_schema = self._output_schema(operation, place)
        for label_, schema in (("inputSchema", input_schema), ("outputSchema", output_schema)):
            problem = self.schemas.check(schema) if schema is not None else ""
            if problem:
                raise DocumentProblem(place_of(place), f"the {label_} made from it is no valid JSON Schema ({problem})")

        raw_name = text(operation.get("operationId"))
        summary = text(operation.get("summary"))
        description = text(operation.get("description"))
        fields: dict[str, Any] = {
            "name": tool_name(raw_name or f"{method}{path}", self.prefix, taken),
            "title": " ".join(summary.split())[:200],
            "description": (description or summary).strip() or f"{label} ({self._title()})",
            "input_schema": input_schema,
            "output_schema": output_schema,
            "read_only_hint": method in READ_ONLY_METHODS,
            "destructive_hint": method == "delete" if method not in READ_ONLY_METHODS else False,
            "idempotent_hint": method in IDEMPOTENT_METHODS,
            "open_world_hint": True,
            "backend_kind": "http",
            "backend_config": config,
        }
        return ToolDraft(label, raw_name, fields, {"path": path, "method": method, "operation": operation}, notes)

    # --- parts -----------------------------------------------------------------------------

    def _title(self) -> str:
        info = mapping(self.document.get("info"))
        return str(info.get("title") or "API")

    def _parameters(
        self, path_item: dict[str, Any], operation: dict[str, Any], place: Path
    ) -> list[tuple[dict[str, Any], Path]]:
        """Path-level parameters overridden by the operation's, each dereferenced."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], Path]] = {}
        for owner, owner_place in ((path_item, place[:2]), (operation, place)):
            listed = owner.get("parameters", [])
            if not isinstance(listed, list):
                continue
            for index, raw in enumerate(listed):
                parameter, parameter_place = self.schemas.deref(raw, (*owner_place, "parameters", index))
                if not isinstance(parameter, dict):
                    raise DocumentProblem(place_of(parameter_place), "a parameter must be an object")
                merged[(str(parameter.get("name")), str(parameter.get("in")))] = (parameter, parameter_place)
        return list(merged.values())

    def _parameter_schema(self, parameter: dict[str, Any], place: Path) -> tuple[Any, set[str]]:
        if self.version == "2.0":
            schema = {key: value for key, value in parameter.items() if key not in SWAGGER_PARAMETER_KEYS}
            if schema.get("type") == "file":
                raise DocumentProblem(place_of(place), "file parameters are not supported: the http backend sends JSON")
            return self.schemas.convert(schema, place)
        if "schema" in parameter:
            return self.schemas.convert(parameter["schema"], (*place, "schema"))
        media = _json_media(parameter.get("content"))
        if media is not None and "schema" in media[1]:
            return self.schemas.convert(media[1]["schema"], (*place, "content", media[0], "schema"))
        return {}, set()

    def _body(
        self,
        operation: dict[str, Any],
        place: Path,
        method: str,
        used: set[str],
        properties: dict[str, Any],
        required: list[str],
        refs: set[str],
        notes: list[str],
    ) -> dict[str, Any] | None:
        """Adds the body's arguments; answers the backend's body template (None: no body)."""
        found = self._body_schema(operation, place)
        if found is None:
            return None
        schema, schema_place, body_required, description = found
        if method not in BODY_METHODS:
            notes.append(
                f"{place_of(schema_place)}: a {method.upper()} request body is left out (the backend sends none)"
            )
            return None
        resolved, resolved_place = self.schemas.deref(schema, schema_place)
        flat = (
            isinstance(resolved, dict)
            and resolved.get("type") == "object"
            and isinstance(resolved.get("properties"), dict)
            and resolved["properties"]
            and not any(key in resolved for key in ("allOf", "anyOf", "oneOf", "additionalProperties"))
            and all(ARGUMENT.match(name) and name not in used for name in resolved["properties"])
        )
        if flat:
            assert isinstance(resolved, dict)
            converted, body_refs = self.schemas.convert(resolved, resolved_place)
            refs |= body_refs
            template: dict[str, str] = {}
            for name, sub in converted.get("properties", {}).items():
                if isinstance(sub, dict) and sub.get("readOnly") is True:
                    continue  # the server sets it (OpenAPI: readOnly properties are not sent)
                used.add(name)
                properties[name] = sub
                template[name] = "{" + name + "}"
            if body_required:
                required.extend(name for name in converted.get("required", []) if name in template)
            return {"template": template}
        converted, body_refs = self.schemas.convert(schema, schema_place)
        refs |= body_refs
        argument = _argument_name("body", "request", used)
        if description and isinstance(converted, dict) and "description" not in converted:
            converted = {**converted, "description": description}
        properties[argument] = converted
        if body_required:
            required.append(argument)
        return {"template": "{" + argument + "}"}

    def _body_schema(self, operation: dict[str, Any], place: Path) -> tuple[Any, Path, bool, str] | None:
        if self.version == "2.0":
            for index, raw in enumerate(listing(operation.get("parameters"))):
                parameter, parameter_place = self.schemas.deref(raw, (*place, "parameters", index))
                if isinstance(parameter, dict) and parameter.get("in") == "body" and "schema" in parameter:
                    described = text(parameter.get("description"))
                    is_required = parameter.get("required") is True
                    return parameter["schema"], (*parameter_place, "schema"), is_required, described
            return None
        if "requestBody" not in operation:
            return None
        body, body_place = self.schemas.deref(operation["requestBody"], (*place, "requestBody"))
        if not isinstance(body, dict):
            raise DocumentProblem(place_of(body_place), "a request body must be an object")
        media = _json_media(body.get("content"))
        is_required = body.get("required") is True
        if media is None:
            content = mapping(body.get("content"))
            if not content:
                return None
            kinds = ", ".join(sorted(content))
            if is_required:
                raise DocumentProblem(place_of(body_place), f"the body is {kinds}; the http backend sends JSON only")
            return None
        media_type, entry = media
        described = text(body.get("description"))
        return entry.get("schema", {}), (*body_place, "content", media_type, "schema"), is_required, described

    def _output_schema(self, operation: dict[str, Any], place: Path) -> dict[str, Any] | None:
        responses = mapping(operation.get("responses"))
        codes = sorted(code for code in responses if str(code)[:1] == "2")
        if not codes:
            return None
        response, response_place = self.schemas.deref(responses[codes[0]], (*place, "responses", codes[0]))
        if not isinstance(response, dict):
            return None
        if self.version == "2.0":
            produces = operation.get("produces", self.document.get("produces", ["application/json"]))
            if not (isinstance(produces, list) and any("json" in str(item) for item in produces)):
                return None
            schema, schema_place = response.get("schema"), (*response_place, "schema")
        else:
            media = _json_media(response.get("content"))
            if media is None:
                return None
            schema, schema_place = media[1].get("schema"), (*response_place, "content", media[0], "schema")
        if not isinstance(schema, dict):
            return None
        converted, refs = self.schemas.root(schema, schema_place)
        if not isinstance(converted, dict) or converted.get("type") != "object":
            return None  # the backend's structured results are objects; others stay text
        if refs:
            converted = {**converted, "$defs": self.schemas.definitions(refs)}
        return converted
