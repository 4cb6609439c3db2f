"""OpenAPI schema objects → JSON Schema 2020-12.

Named schemas (``components.schemas``, Swagger's ``definitions``) become ``$defs`` entries,
converted once per document and referenced as ``#/$defs/<name>``: a tool's schema carries only
the definitions it reaches, and a recursive schema stays a finite reference instead of an
endless expansion. Other local references (a parameter's or a response's schema) are inlined,
with a cycle among them refused. External references are refused: Toolbay never fetches schemas.

OpenAPI 3.0 and Swagger 2.0 schemas are an extended subset of draft 4: ``nullable`` becomes a
``"null"`` type (or a ``null`` alternative), boolean ``exclusiveMinimum``/``exclusiveMaximum``
become numbers, ``example`` becomes ``examples``, tuple ``items`` become ``prefixItems``;
``readOnly``, ``writeOnly``, ``deprecated``, ``format`` and ``default`` are kept. Keywords
2020-12 does not know (``discriminator``, ``xml``, ``x-*``) are left out, and so are values
that break the keyword's rules (a ``required: true``, a pattern that is no regular expression),
which real documents carry more often than one would think.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from tools_app.catalog.schemas import is_regex, quickly_valid
from tools_app.imports.openapi.document import DocumentProblem, place_of

Path = tuple[str | int, ...]
FRAGMENT_SAFE = "/~!$&'()*+,;=:@?"
TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_VALUES = (
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
)
TEXTS = ("title", "description", "format", "contentMediaType", "contentEncoding", "$comment")
COUNTS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
NUMBERS = ("minimum", "maximum")
FLAGS = ("readOnly", "writeOnly", "deprecated", "uniqueItems")
VALUES = ("default", "const")


def _unescape(step: str) -> str:
    # A JSON pointer in a URI fragment may be percent-encoded ("~1pets~1%7Bid%7D").
    return unquote(step).replace("~1", "/").replace("~0", "~")


def _escape(step: str) -> str:
    return step.replace("~", "~0").replace("/", "~1")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class SchemaConverter:
    """Converts the schemas of one document; definitions are converted once and shared."""

    def __init__(self, document: dict[str, Any], version: str) -> None:
        self.document = document
        self.legacy = version in ("2.0", "3.0")
        self.named_prefix = "#/definitions/" if version == "2.0" else "#/components/schemas/"
        self.named_path: Path = ("definitions",) if version == "2.0" else ("components", "schemas")
        self._named: dict[str, Any] = {}
        self._named_refs: dict[str, set[str]] = {}
        self._converting: set[str] = set()
        self._checked: dict[str, str] = {}

    # --- references --------------------------------------------------------------------

    def lookup(self, ref: str, place: Path) -> tuple[Any, Path]:
        """The node a local reference points at, with its place."""
        if not ref.startswith("#"):
            raise DocumentProblem(
                place_of(place), f"external reference {ref!r}: only references inside the document are read"
            )
        node: Any = self.document
        path: list[str | int] = []
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            step = _unescape(raw)
            if isinstance(node, dict) and step in node:
                node = node[step]
                path.append(step)
            elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
                node = node[int(step)]
                path.append(int(step))
            else:
                raise DocumentProblem(place_of(place), f"the reference {ref!r} points at nothing")
        return node, tuple(path)

    def deref(self, node: Any, place: Path, *, limit: int = 20) -> tuple[Any, Path]:
        """Follow ``$ref`` chains of non-schema objects (parameters, bodies, responses)."""
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            limit -= 1
            if limit < 0:
                raise DocumentProblem(place_of(place), "the references form a cycle")
            node, place = self.lookup(node["$ref"], place)
        return node, place

    def _named_ref(self, ref: str, place: Path, refs: set[str]) -> dict[str, Any]:
        rest = ref[len(self.named_prefix) :]
        name_raw, _, tail = rest.partition("/")
        name = _unescape(name_raw)
        named = self.named(name, place)
        target: Any = named
        if name in self._converting:
            # A schema referring into itself while it is being converted: check the raw form
            # (conversion keeps properties, items and the combinators where they are).
            target, _ = self.lookup(self.named_prefix + name_raw, place)
        for step in tail.split("/") if tail else []:
            step = _unescape(step)
            if isinstance(target, dict) and step in target:
                target = target[step]
            elif isinstance(target, list) and step.isdigit() and int(step) < len(target):
                target = target[int(step)]
            else:
                raise DocumentProblem(place_of(place), f"the reference {ref!r} points at nothing usable")
        refs.add(name)
        # A JSON pointer in a URI fragment: percent-encoded where a fragment needs it.
        pointer = f"/$defs/{_escape(name)}" + (f"/{tail}" if tail else "")
        return {"$ref": "#" + quote(pointer, safe=FRAGMENT_SAFE)}

    def named(self, name: str, place: Path) -> Any:
        """A named schema, converted (once)."""
        if name in self._named:
            return self._named[name]
        container: Any = self.document
        for step in self.named_path:
            container = container.get(str(step)) if isinstance(container, dict) else None
        if not isinstance(container, dict) or name not in container:
            raise DocumentProblem(place_of(place), f"the reference to schema {name!r} points at nothing")
        if name in self._converting:  # a recursive definition: its reference is enough for now
            return {}
        self._converting.add(name)
        refs: set[str] = set()
        try:
            converted = self._convert(container[name], (*self.named_path, name), refs, ())
        finally:
            self._converting.discard(name)
        self._named[name] = converted
        self._named_refs[name] = refs
        return converted

    def definitions(self, names: Iterable[str]) -> dict[str, Any]:
        """The ``$defs`` a schema that references ``names`` needs: those and what they reach."""
        found: dict[str, Any] = {}
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found[name] = self._named[name]
            todo.extend(self._named_refs.get(name, ()))
        return dict(sorted(found.items()))

    def check(self, schema: dict[str, Any]) -> str:
        """Why ``schema`` is no valid 2020-12 schema (Draft202012Validator.check_schema), or "".

        The metaschema judges each ``$defs`` entry on its own, so each named schema is checked
        once per document and a tool's own part without them.
        """
        outer = {key: value for key, value in schema.items() if key != "$defs"}
        problems = [_schema_problem(outer, "")]
        for name in schema.get("$defs", {}):
            if name not in self._checked:
                self._checked[name] = _schema_problem(self._named[name], f"/$defs/{name}")
            problems.append(self._checked[name])
        return next((problem for problem in problems if problem), "")

    # --- conversion ----------------------------------------------------------------------

    def convert(self, schema: Any, place: Path) -> tuple[Any, set[str]]:
        """A schema for use inside a tool's schema, and the definitions it references."""
        refs: set[str] = set()
        return self._convert(schema, place, refs, ()), refs

    def root(self, schema: Any, place: Path) -> tuple[Any, set[str]]:
        """Like ``convert``, with a reference at the top inlined (a tool's schemas must say
        ``"type": "object"`` at their root)."""
        refs: set[str] = set()
        inlined: tuple[str, ...] = ()
        for _ in range(20):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            ref = schema["$ref"]
            if ref in inlined:
                raise DocumentProblem(place_of(place), "the references form a cycle")
            inlined += (ref,)
            schema, place = self.lookup(ref, place)
        converted = self._convert(schema, place, refs, ())
        return converted, refs

    def _convert(self, node: Any, place: Path, refs: set[str], inlining: tuple[str, ...]) -> Any:
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise DocumentProblem(place_of(place), "a schema must be an object")
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref.startswith(self.named_prefix):
                result = self._named_ref(ref, place, refs)
            else:
                if ref in inlining:
                    raise DocumentProblem(place_of(place), f"the reference {ref!r} is recursive outside named schemas")
                target, target_place = self.lookup(ref, place)
                result = self._convert(target, target_place, refs, (*inlining, ref))
            if self.legacy:
                # In 3.0 and 2.0 a reference's siblings are ignored; a nullable one is a common intent.
                if node.get("nullable") is True or node.get("x-nullable") is True:
                    return {"anyOf": [result, {"type": "null"}]}
                return result
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            if not siblings:
                return result
            rest = self._convert(siblings, place, refs, inlining)
            return {**rest, "allOf": [*rest.get("allOf", []), result]} if "$ref" not in result else {**rest, **result}
        out: dict[str, Any] = {}
        for key, value in node.items():
            self._keyword(out, key, value, (*place, key), refs, inlining)
        if self.legacy:
            self._legacy(node, out)
        return out

    def _keyword(
        self, out: dict[str, Any], key: str, value: Any, place: Path, refs: set[str], inlining: tuple[str, ...]
    ) -> None:
        if key in SCHEMA_MAPS or key == "$defs":
            if isinstance(value, dict):
                out[key] = {
                    name: self._convert(sub, (*place, name), refs, inlining)
                    for name, sub in value.items()
                    if isinstance(sub, dict | bool)
                }
        elif key in SCHEMA_LISTS:
            if isinstance(value, list) and value:
                out[key] = [self._convert(sub, (*place, i), refs, inlining) for i, sub in enumerate(value)]
        elif key in SCHEMA_VALUES:
            if isinstance(value, dict | bool):
                out[key] = self._convert(value, place, refs, inlining)
        elif key == "items":
            if isinstance(value, list):
                if value:
                    out["prefixItems"] = [
                        self._convert(sub, (*place, i), refs, inlining) for i, sub in enumerate(value)
                    ]
            elif isinstance(value, dict | bool):
                out["items"] = self._convert(value, place, refs, inlining)
        elif key == "type":
            if isinstance(value, str) and value in TYPES:
                out["type"] = value
            elif isinstance(value, list) and value and all(isinstance(t, str) and t in TYPES for t in value):
                out["type"] = list(dict.fromkeys(value))
        elif key == "required":
            if isinstance(value, list) and all(isinstance(item, str) for item in value):
                out["required"] = list(dict.fromkeys(value))
        elif key == "enum":
            if isinstance(value, list):
                out["enum"] = value
        elif key == "pattern":
            if isinstance(value, str) and is_regex(value):
                out["pattern"] = value
        elif key in TEXTS:
            if isinstance(value, str):
                out[key] = value
        elif key in COUNTS:
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                out[key] = value
        elif key in NUMBERS:
            if _is_number(value):
                out[key] = value
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            if _is_number(value):
                out[key] = value  # 3.1's form; the legacy boolean form is handled after
        elif key == "multipleOf":
            if _is_number(value) and value > 0:
                out[key] = value
        elif key in FLAGS:
            if isinstance(value, bool):
                out[key] = value
        elif key in VALUES:
            out[key] = value
        elif key == "examples":
            if isinstance(value, list):
                out["examples"] = value
        elif key == "example":
            out.setdefault("examples", [value])
        elif key == "dependentRequired" and _string_lists(value):
            out[key] = value

    def _legacy(self, node: dict[str, Any], out: dict[str, Any]) -> None:
        for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if node.get(flag) is True and bound in out:
                out[flag] = out.pop(bound)
        if node.get("nullable") is True or node.get("x-nullable") is True:
            kind = out.get("type")
            if isinstance(kind, str):
                out["type"] = [kind, "null"]
                if "enum" in out and None not in out["enum"]:
                    out["enum"] = [*out["enum"], None]
            elif kind is None and any(key in out for key in ("allOf", "anyOf", "oneOf")):
                combined = {key: out.pop(key) for key in ("allOf", "anyOf", "oneOf") if key in out}
                out["anyOf"] = [combined, {"type": "null"}]
            elif kind is None and "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]


def _string_lists(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, list) and all(isinstance(i, str) for i in v) for v in value.values()
    )


def _schema_problem(schema: Any, prefix: str) -> str:
    if quickly_valid(schema):
        return ""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"at {prefix}/{'/'.join(str(step) for step in exc.path)}: {exc.message}"
    return ""
