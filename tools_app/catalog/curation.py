"""Curation: what the model sees of a tool, laid over the tool's own (source) definition.

A tool's row holds its source definition: what an admin typed, or what an OpenAPI import or
an upstream refresh wrote (and overwrites on the next one). A ``ToolCuration`` keeps the
admin's overrides apart from it, so they survive every re-import; they are applied when the
catalog snapshot is built (``ToolSpec.from_model``), never per request:

- ``name``, ``title``, ``description``: published instead of the source's (empty: the source's);
- ``arguments``: per top-level argument of the source's inputSchema, a rule object::

      {"account_id": {"hidden": true, "value": "acme"},   # fixed: always sent, never settable
       "limit": {"default": 20, "maximum": 50},           # sent when omitted; narrowed
       "status": {"enum": ["open"], "description": "…"},  # narrowed, re-described
       "debug": {"hidden": true}}                         # hidden, nothing sent

  ``hidden`` removes the argument from the published inputSchema (``required`` included) and
  drops it from what a client sends; ``value`` (hidden only) is what the backend always gets.
  ``default`` (visible arguments) is what the backend gets when the client omits it; the
  argument becomes optional and the published schema shows the default. ``enum``, ``minimum``,
  ``maximum``, ``minLength``, ``maxLength`` and ``pattern`` narrow it; ``title`` and
  ``description`` re-word it.

The published schema is always a subset of the source's: narrowing keywords only tighten the
source's own (a wider one is refused), a ``pattern`` is added next to the source's (both
must match), enum values, fixed values and defaults must be valid under the source.

A curation checked when saved can stop fitting when the source changes later (an argument
renamed upstream, an enum shrunk). The snapshot then applies what still fits: a hidden
argument stays hidden (its value is sent only while the source still has the argument), a
narrowing or default that no longer fits is left out (the source's own rule applies), and
``problems`` says what was left out, for the admin to show.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from tools_app.catalog.schemas import compile_validator, first_error, is_regex

RULE_KEYS = frozenset(
    {"hidden", "value", "default", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "title",
     "description"}
)  # fmt: skip
NARROWING_KEYS = ("enum", "minimum", "maximum", "minLength", "maxLength", "pattern")


class CurationProblem(ValueError):
    """A curation cannot be applied as written; the message names the argument and the rule."""


@dataclass(frozen=True)
class Curated:
    """A curation applied to a source definition: what is published and what the backend gets."""

    input_schema: dict[str, Any]
    fixed: dict[str, Any] = field(default_factory=dict)  # always sent, whatever the client says
    defaults: dict[str, Any] = field(default_factory=dict)  # sent when the client omits them
    hidden: frozenset[str] = frozenset()  # dropped from what the client sends
    problems: tuple[str, ...] = ()  # what no longer fits the source and was left out


def backend_arguments(
    arguments: dict[str, Any], *, fixed: dict[str, Any], defaults: dict[str, Any], hidden: frozenset[str]
) -> dict[str, Any]:
    """What the backend receives for a client's (already validated) arguments: hidden ones
    dropped, defaults filled in, fixed values set. Values are deep copies: a handler that
    changes its arguments cannot change the next call's."""
    if not (fixed or defaults or hidden):
        return arguments
    merged = {name: value for name, value in arguments.items() if name not in hidden}
    for name, value in defaults.items():
        if name not in merged:
            merged[name] = copy.deepcopy(value)
    for name, value in fixed.items():
        merged[name] = copy.deepcopy(value)
    return merged


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _lower_bound(prop: dict[str, Any]) -> float | None:
    bounds = [prop[key] for key in ("minimum", "exclusiveMinimum") if _number(prop.get(key))]
    return max(bounds) if bounds else None


def _upper_bound(prop: dict[str, Any]) -> float | None:
    bounds = [prop[key] for key in ("maximum", "exclusiveMaximum") if _number(prop.get(key))]
    return min(bounds) if bounds else None


class _Source:
    """The source inputSchema, and a validator for values of one of its arguments (its $defs
    and $refs resolve against the whole schema)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        raw = schema.get("properties")
        self.properties: dict[str, Any] = raw if isinstance(raw, dict) else {}
        self._root = compile_validator(schema)

    def prop(self, name: str) -> dict[str, Any]:
        found = self.properties.get(name)
        return found if isinstance(found, dict) else {}

    def value_problem(self, name: str, value: Any) -> str:
        validator = self._root.evolve(schema=self.properties.get(name, True))
        error = first_error(validator, value)
        return "" if error is None else error.message


def _narrowing(name: str, rule: dict[str, Any], source: _Source) -> dict[str, Any]:
    """The keywords ``rule`` adds to the source's property; CurationProblem when one would widen it."""
    prop = source.prop(name)
    where = f"arguments.{name}"
    added: dict[str, Any] = {}
    if "enum" in rule:
        values = rule["enum"]
        if not isinstance(values, list) or not values:
            raise CurationProblem(f"{where}.enum: a non-empty list of the values to offer")
        for value in values:
            if isinstance(prop.get("enum"), list) and value not in prop["enum"]:
                raise CurationProblem(f"{where}.enum: {value!r} is not one of the source's values {prop['enum']!r}")
            if "const" in prop and value != prop["const"]:
                raise CurationProblem(f"{where}.enum: {value!r} is not the source's only value {prop['const']!r}")
            problem = source.value_problem(name, value)
            if problem:
                raise CurationProblem(f"{where}.enum: {value!r} is not valid for the source: {problem}")
        added["enum"] = values
    for key in ("minimum", "maximum"):
        if key not in rule:
            continue
        value = rule[key]
        if not _number(value):
            raise CurationProblem(f"{where}.{key}: a number")
        if key == "minimum":
            low = _lower_bound(prop)
            if low is not None and value < low:
                raise CurationProblem(f"{where}.minimum: {value} would widen the source's lower bound {low}")
        else:
            high = _upper_bound(prop)
            if high is not None and value > high:
                raise CurationProblem(f"{where}.maximum: {value} would widen the source's upper bound {high}")
        added[key] = value
    if "minimum" in added and "maximum" in added and added["minimum"] > added["maximum"]:
        raise CurationProblem(f"{where}: minimum {added['minimum']} is above maximum {added['maximum']}")
    for key in ("minLength", "maxLength"):
        if key not in rule:
            continue
        value = rule[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CurationProblem(f"{where}.{key}: a whole number of characters, 0 or more")
        current = prop.get(key)
        if isinstance(current, int) and (value < current if key == "minLength" else value > current):
            raise CurationProblem(f"{where}.{key}: {value} would widen the source's {key} {current}")
        added[key] = value
    if "minLength" in added and "maxLength" in added and added["minLength"] > added["maxLength"]:
        raise CurationProblem(f"{where}: minLength {added['minLength']} is above maxLength {added['maxLength']}")
    if "pattern" in rule:
        pattern = rule["pattern"]
        if not isinstance(pattern, str) or not pattern or not is_regex(pattern):
            raise CurationProblem(f"{where}.pattern: a regular expression (ECMA 262 / Python re syntax)")
        added["pattern"] = pattern
    return added


def _narrowed(prop: Any, added: dict[str, Any]) -> dict[str, Any]:
    """The source's property with ``added`` tightening it (a second pattern goes in ``allOf``:
    both must match)."""
    result = dict(prop) if isinstance(prop, dict) else {}
    for key, value in added.items():
        if key == "pattern" and isinstance(result.get("pattern"), str) and result["pattern"] != value:
            result["allOf"] = [*result.get("allOf", []), {"pattern": value}]
        else:
            result[key] = value
    return result


def _rule_object(name: str, rule: Any) -> dict[str, Any]:
    where = f"arguments.{name}"
    if not isinstance(rule, dict):
        raise CurationProblem(f'{where}: a rule object such as {{"hidden": true, "value": …}}')
    unknown = set(rule) - RULE_KEYS
    if unknown:
        raise CurationProblem(f"{where}: unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(RULE_KEYS))}")
    if "hidden" in rule and not isinstance(rule["hidden"], bool):
        raise CurationProblem(f"{where}.hidden: true or false")
    hidden = rule.get("hidden") is True
    if "value" in rule and not hidden:
        raise CurationProblem(f'{where}.value: a fixed value is for a hidden argument (add "hidden": true)')
    if hidden:
        extra = set(rule) - {"hidden", "value"}
        if extra:
            raise CurationProblem(
                f'{where}: a hidden argument takes only a fixed "value" (the model never sees it); drop {sorted(extra)}'
            )
    for key in ("title", "description"):
        if key in rule and not isinstance(rule[key], str):
            raise CurationProblem(f"{where}.{key}: text")
    return rule


def apply_curation(source_schema: dict[str, Any], arguments: Any, *, strict: bool) -> Curated:
    """The published inputSchema and the backend's extra arguments for these argument rules.

    ``strict`` (saving a curation): the first rule that does not fit raises CurationProblem.
    Otherwise (building a snapshot) a rule that no longer fits is left out and named in
    ``problems``; hidden arguments stay hidden whatever the source says.
    """
    if not arguments:
        return Curated(input_schema=source_schema)
    if not isinstance(arguments, dict):
        raise CurationProblem('arguments: a JSON object of rules per argument, e.g. {"limit": {"maximum": 50}}')
    source = _Source(source_schema)
    schema = dict(source_schema)
    properties = dict(source.properties)
    required = [r for r in source_schema.get("required", []) if isinstance(r, str)]
    fixed: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    hidden: set[str] = set()
    problems: list[str] = []
    for name, raw in arguments.items():
        try:
            rule = _rule_object(name, raw)
        except CurationProblem as exc:
            if strict:
                raise
            problems.append(str(exc))
            continue
        known = name in source.properties
        if rule.get("hidden") is True:
            hidden.add(name)  # fail closed: a client never sets what an admin hid
            properties.pop(name, None)
            try:
                if not known:
                    raise CurationProblem(f"arguments.{name}: the source has no argument {name!r}")
                if "value" in rule:
                    problem = source.value_problem(name, rule["value"])
                    if problem:
                        raise CurationProblem(f"arguments.{name}.value: {rule['value']!r} is not valid: {problem}")
                    fixed[name] = rule["value"]
                elif name in required:
                    raise CurationProblem(
                        f'arguments.{name}: the source requires it; a hidden required argument needs a fixed "value"'
                    )
            except CurationProblem as exc:
                if strict:
                    raise
                problems.append(str(exc))
            if name in required:
                required.remove(name)
            continue
        try:
            if not known:
                raise CurationProblem(f"arguments.{name}: the source has no argument {name!r}")
            added = _narrowing(name, rule, source)
            prop = _narrowed(properties[name], added)
            if "default" in rule:
                problem = source.value_problem(name, rule["default"])
                if not problem:
                    narrowed_error = first_error(source._root.evolve(schema=prop), rule["default"])
                    problem = "" if narrowed_error is None else narrowed_error.message
                if problem:
                    raise CurationProblem(f"arguments.{name}.default: {rule['default']!r} is not valid: {problem}")
                prop["default"] = rule["default"]
                defaults[name] = rule["default"]
            for key in ("title", "description"):
                if key in rule:
                    prop[key] = rule[key]
        except CurationProblem as exc:
            if strict:
                raise
            problems.append(str(exc))
            continue
        properties[name] = prop
        if name in defaults and name in required:
            required.remove(name)
    schema["properties"] = properties
    if required or "required" in source_schema:
        schema["required"] = required
    if not required:
        schema.pop("required", None)
    return Curated(
        input_schema=schema,
        fixed=fixed,
        defaults=defaults,
        hidden=frozenset(hidden),
        problems=tuple(problems),
    )
