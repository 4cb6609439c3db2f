"""RFC 6570 URI templates of resource templates: checking, expanding and matching.

``uritemplate`` (python-hyper) parses and expands templates; it has no reverse operation,
so matching a concrete URI against a template — which ``resources/read`` needs to find the
template that serves a URI, and its variables — is done here with a regular expression
built from the parsed expressions. Matching covers what resource templates use in
practice: one value per variable (no exploded lists or maps), every operator of levels
1-3 (``{var}``, ``{+var}``, ``{#var}``, ``{.var}``, ``{/var}``, ``{;var}``, ``{?a,b}``,
``{&a}``) and prefixes (``{var:3}``). Values come back percent-decoded; form-style query
variables may be missing or in any order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from uritemplate import URITemplate
from uritemplate.variable import Operator

MAX_TEMPLATE_LENGTH = 2048
_VARNAME = re.compile(r"^[A-Za-z0-9_.%]+$")
# What a value expanded by each operator can contain (reserved expansion keeps / ? # etc.).
_SEGMENT = r"[^/?#&,;=]*"
_RESERVED = r"[^?#]*?"
_FRAGMENT = r".*?"


class TemplateProblem(ValueError):
    """The text is not a usable URI template; the message says why."""


@dataclass(frozen=True)
class UriTemplateMatcher:
    template: str
    variables: tuple[str, ...]
    _pattern: re.Pattern[str] = field(repr=False)
    _query_names: tuple[str, ...] = field(repr=False)

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of ``uri`` when the template produces it, else None."""
        path, query = uri, ""
        if self._query_names:
            path, _, query = uri.partition("?")
        found = self._pattern.fullmatch(path)
        if found is None:
            return None
        values = {name: unquote(value) for name, value in found.groupdict().items() if value is not None}
        if self._query_names and query:
            for name, value in parse_qsl(query, keep_blank_values=True):
                if name not in self._query_names:
                    return None
                values[name] = value
        return {_unescape_name(name): value for name, value in values.items()}

    def expand(self, variables: dict[str, str]) -> str:
        return str(URITemplate(self.template).expand(dict[str, Any](variables)))


def _unescape_name(group: str) -> str:
    return group.split("__", 1)[1] if "__" in group else group


def _group(name: str, index: int) -> str:
    # Group names must be identifiers; variable names may hold "." and "%".
    return f"v{index}__{name}"


def compile_template(template: str) -> UriTemplateMatcher:
    """Parse ``template``; raises TemplateProblem."""
    if not isinstance(template, str) or not template.strip():
        raise TemplateProblem("A URI template is required, e.g. file:///logs/{date}.txt.")
    if len(template) > MAX_TEMPLATE_LENGTH:
        raise TemplateProblem(f"A URI template may be {MAX_TEMPLATE_LENGTH} characters at most.")
    if template.count("{") != template.count("}") or not template.isascii() or any(c.isspace() for c in template):
        raise TemplateProblem("This is not a URI template: braces must pair up, and no spaces or non-ASCII text.")
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", template):
        raise TemplateProblem("A URI template must start with a scheme, e.g. file:// or https://.")
    try:
        parsed = URITemplate(template)
    except Exception as exc:  # uritemplate raises plain exceptions on malformed expressions
        raise TemplateProblem(f"This is not a URI template: {exc}") from None
    parts: list[str] = []
    names: list[str] = []
    query_names: list[str] = []
    position = 0
    index = 0
    for variable in parsed.variables:
        start = template.index("{" + variable.original + "}", position)
        parts.append(re.escape(template[position:start]))
        position = start + len(variable.original) + 2
        operator = variable.operator
        for name, options in variable.variables:
            if not _VARNAME.match(name):
                raise TemplateProblem(f"{name!r} is not a valid variable name.")
            if options.get("explode"):
                raise TemplateProblem(f"{{{variable.original}}}: exploded variables (*) cannot be matched.")
            if name in names:
                raise TemplateProblem(f"The variable {name!r} appears twice.")
            names.append(name)
        if operator in (Operator.form_style_query, Operator.form_style_query_continuation):
            if position != len(template):
                raise TemplateProblem("Query expressions ({?…} and {&…}) must end the template.")
            query_names += [name for name, _ in variable.variables]
            continue
        for offset, (name, _) in enumerate(variable.variables):
            group = _group(name, index)
            index += 1
            lead, value = _operator_parts(operator, name, first=offset == 0)
            # An undefined variable expands to nothing, its lead character included.
            parts.append(f"(?:{lead}(?P<{group}>{value}))?" if lead else f"(?P<{group}>{value})")
    parts.append(re.escape(template[position:]))
    if query_names and "?" in re.sub(r"\{[^}]*\}", "", template):
        raise TemplateProblem("A template with {?…} must not have a literal query too.")
    return UriTemplateMatcher(
        template=template,
        variables=tuple(names),
        _pattern=re.compile("".join(parts)),
        _query_names=tuple(query_names),
    )


def _operator_parts(operator: Operator, name: str, *, first: bool) -> tuple[str, str]:
    """(the literal that precedes the value, as a regex, or ""; the value's regex)."""
    if operator == Operator.default:
        return ("" if first else ","), _SEGMENT
    if operator == Operator.reserved:
        return ("" if first else ","), _RESERVED
    if operator == Operator.fragment:
        return ("(?:#)" if first else ","), _FRAGMENT
    if operator == Operator.label_with_dot_prefix:
        return r"(?:\.)", r"[^/?#.]*"
    if operator == Operator.path_segment:
        return "(?:/)", r"[^/?#]*"
    # path-style parameters: ;name=value
    return f"(?:;{re.escape(name)}=?)", r"[^/?#;]*"
