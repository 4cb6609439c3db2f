"""Reading an OpenAPI document: text (JSON or YAML) or a URL, its version, and its structure
checked against the specification's own JSON Schemas.

The structural check uses the official schemas that ``openapi-spec-validator`` ships, run by
``jsonschema-rs``: openapi-spec-validator's own validation took 110 s on GitHub's description
(1,223 operations, 13 MB) and the ``jsonschema`` package 25 s; jsonschema-rs takes 0.1 s.
Problems are reported at the place in the document (``paths./pets.get.parameters[2]``).
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import httpx
import jsonschema_rs
import yaml
from asgiref.sync import async_to_sync
from django.conf import settings

from tools_app.backends.http.netguard import DestinationBlocked, outbound_client, read_at_most

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
FETCH_TIMEOUT_SECONDS = 30.0
# Parts of a document the import does not read: a mistake there (httpbin's own description has
# unknown fields in info.contact) is a note, not a reason to refuse the document.
HARMLESS = {"info", "tags", "externalDocs", "webhooks", "jsonSchemaDialect"}
SCHEMA_FILES = {"2.0": "v2.0", "3.0": "v3.0", "3.1": "v3.1"}


class DocumentProblem(ValueError):
    """The document cannot be used; ``place`` says where (``paths./pets.get``), or is empty."""

    def __init__(self, place: str, message: str) -> None:
        super().__init__(f"{place}: {message}" if place else message)
        self.place = place
        self.message = message


def mapping(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else empty: documents put anything anywhere."""
    return value if isinstance(value, dict) else {}


def listing(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def place_of(path: Sequence[str | int]) -> str:
    """``["paths", "/pets", "get", "parameters", 2]`` → ``paths./pets.get.parameters[2]``."""
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text += f".{step}" if text else str(step)
    return text or "(the document)"


# YAML aliases share one node many times; copying them out could grow a small text
# exponentially ("billion laughs"), so the copy stops at this many values (GitHub's 13 MB
# description has about 1.5 million).
MAX_YAML_VALUES = 5_000_000


def _plain(value: Any, budget: list[int]) -> Any:
    """YAML gives dates and integer keys (response codes); JSON has neither."""
    budget[0] -= 1
    if budget[0] < 0:
        raise DocumentProblem("", f"the document has more than {MAX_YAML_VALUES} values (YAML aliases?)")
    if isinstance(value, dict):
        return {str(key): _plain(item, budget) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, budget) for item in value]
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    return value


def _check_size(size: int) -> None:
    limit = settings.TOOLBAY_OPENAPI_MAX_DOCUMENT_BYTES
    if size > limit:
        raise DocumentProblem("", f"the document is larger than {limit} bytes")


def parse_text(text: str | bytes) -> dict[str, Any]:
    """The document as JSON data; DocumentProblem when it is neither JSON nor YAML of an object."""
    _check_size(len(text))
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise DocumentProblem("", "the document is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise DocumentProblem("", "the document nests too deeply") from None
    except ValueError:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            data = _plain(yaml.load(text, Loader=loader), [MAX_YAML_VALUES])
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            raise DocumentProblem("", f"the document is neither JSON nor YAML{where}") from None
        except RecursionError:
            raise DocumentProblem("", "the document nests too deeply") from None
    if not isinstance(data, dict):
        raise DocumentProblem("", "the document must be a JSON or YAML object")
    return data


def version_of(document: dict[str, Any]) -> str:
    """``"2.0"``, ``"3.0"`` or ``"3.1"``; DocumentProblem for anything else."""
    declared = document.get("openapi", document.get("swagger"))
    if isinstance(declared, str):
        if declared.startswith("3.0."):
            return "3.0"
        if declared.startswith("3.1."):
            return "3.1"
        if declared == "2.0" and "swagger" in document:
            return "2.0"
    field = "swagger" if "swagger" in document else "openapi"
    raise DocumentProblem(field, f"unsupported version {declared!r}; OpenAPI 3.0, 3.1 and Swagger 2.0 are read")


@functools.cache
def _structure_validator(version: str) -> Any:
    schema_file = resources.files("openapi_spec_validator") / "resources" / "schemas" / SCHEMA_FILES[version]
    return jsonschema_rs.validator_for(json.loads((schema_file / "schema.json").read_text()))


@dataclass
class StructureCheck:
    """Problems found per operation (those operations are skipped) and elsewhere (fatal)."""

    per_operation: dict[tuple[str, str], str]
    notes: list[str]


def check_structure(document: dict[str, Any], version: str) -> StructureCheck:
    """Raise DocumentProblem for a problem outside any operation; collect those inside one, and
    notes for those in parts the import does not read.

    An operation whose own text breaks the specification is skipped with its place, so one
    broken operation does not cost the rest of a large API.
    """
    per_operation: dict[tuple[str, str], str] = {}
    notes: list[str] = []
    fatal: list[str] = []
    for error in _structure_validator(version).iter_errors(document):
        path = list(error.instance_path)
        message = f"{place_of(path)}: {error.message}"
        if len(path) >= 3 and path[0] == "paths" and path[2] in METHODS:
            per_operation.setdefault((str(path[1]), str(path[2])), message)
        elif len(path) >= 3 and path[0] == "paths" and path[2] == "parameters":
            per_operation.setdefault((str(path[1]), "*"), message)
        elif len(path) == 2 and path[0] == "paths":
            # About the path item as a whole (Swagger 2.0 knows no "trace"): its operations are
            # each checked on their own.
            notes.append(message)
        elif (path and (path[0] in HARMLESS or str(path[0]).startswith("x-"))) or (
            not path and error.message.startswith("Additional properties")  # an unknown top-level field
        ):
            if len(notes) < 10:
                notes.append(f"{message} (ignored: the import does not use it)")
        else:
            fatal.append(message)
        if len(fatal) >= 3:
            break
    if fatal:
        # The deepest place is the most precise one the checker found.
        first = max(fatal, key=lambda message: message.split(": ", 1)[0].count("."))
        place, _, detail = first.partition(": ")
        raise DocumentProblem(place, detail[:500])
    return StructureCheck(per_operation, notes)


async def _download(url: str) -> bytes:
    limit = settings.TOOLBAY_OPENAPI_MAX_DOCUMENT_BYTES
    client = outbound_client()
    headers = {"Accept": "application/json, application/yaml, */*"}
    async with client.stream("GET", url, headers=headers, timeout=FETCH_TIMEOUT_SECONDS) as response:
        if response.status_code != 200:
            raise DocumentProblem("", f"fetching {url} answered HTTP {response.status_code}")
        body = await read_at_most(response, limit)
    if body is None:
        raise DocumentProblem("", f"the document at {url} is larger than {limit} bytes")
    return body


def fetch_document(url: str) -> bytes:
    """The body at ``url``, fetched through the SSRF guard (TOOLBAY_OUTBOUND_ALLOWED_HOSTS opens
    private hosts) and capped at TOOLBAY_OPENAPI_MAX_DOCUMENT_BYTES."""
    if not url.startswith(("http://", "https://")):
        raise DocumentProblem("", "a document URL must start with http:// or https://")
    try:
        return async_to_sync(_download)(url)
    except DestinationBlocked as exc:
        raise DocumentProblem("", f"fetching {url} was refused: {exc}") from None
    except httpx.HTTPError as exc:
        raise DocumentProblem("", f"could not fetch {url}: {exc or type(exc).__name__}") from None
