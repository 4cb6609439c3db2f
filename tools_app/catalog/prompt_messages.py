"""Prompt messages written in the admin: their shape, and rendering them from arguments.

Text is a Mustache template (https://mustache.github.io/mustache.5.html), rendered by
``pystache``: logic-less by design — names are looked up in the arguments (a dict of
strings) and nothing else, no expressions, no attribute access on Python objects (pystache
treats built-in values such as strings as plain data), no code. ``{{name}}`` inserts an
argument, ``{{#name}}…{{/name}}`` shows a part only when it was given and
``{{^name}}…{{/name}}`` only when it was not. Output is not HTML-escaped (prompts are not
HTML), and partials (``{{> file}}``), which would read files, are refused at save time
and rendered with an empty partial table anyway.

What is rendered: the ``text`` of text blocks, and the ``uri`` and ``text`` of embedded
resources and resource links. Images and audio are stored base64 data, sent as they are.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import pystache
from pystache.parser import ParsingError

ROLES = ("user", "assistant")
BLOCK_TYPES = ("text", "image", "audio", "resource", "resource_link")
MAX_MESSAGES = 100
_SECTION_TAG = re.compile(r"\{\{\s*([#^/])\s*([^}]*?)\s*\}\}")
_RENDERER = pystache.Renderer(escape=lambda text: text, partials={}, missing_tags="ignore")


class MessageProblem(ValueError):
    """A message list that cannot be served; the message names the place."""


def template_names(template: str) -> set[str]:
    """The argument names a template refers to; raises MessageProblem on a broken template."""
    if "{{>" in template.replace(" ", "") or "{{=" in template:
        raise MessageProblem("partials ({{> …}}) and delimiter changes ({{= … =}}) are not allowed")
    # pystache renders an unclosed section as nothing at all; say so instead.
    open_sections: list[str] = []
    for sigil, name in _SECTION_TAG.findall(template):
        if sigil in "#^":
            open_sections.append(name)
        elif not open_sections or open_sections.pop() != name:
            raise MessageProblem(f"not a valid Mustache template: {{{{/{name}}}}} closes no open section")
    if open_sections:
        raise MessageProblem(f"not a valid Mustache template: the section {open_sections[-1]!r} is never closed")
    try:
        parsed = pystache.parse(template)
    except (ParsingError, Exception) as exc:  # pystache raises plain exceptions for some errors
        raise MessageProblem(f"not a valid Mustache template: {exc}") from None
    names: set[str] = set()

    def walk(nodes: Any) -> None:
        for node in getattr(nodes, "_parse_tree", nodes):
            key = getattr(node, "key", None)
            if isinstance(key, str) and key != ".":
                names.add(key)
            inner = getattr(node, "parsed", None)
            if inner is not None:
                walk(inner)

    walk(parsed)
    return names


def render(template: str, arguments: dict[str, str]) -> str:
    return str(_RENDERER.render(template, arguments))


def _check_base64(value: Any, where: str) -> None:
    if not isinstance(value, str) or not value:
        raise MessageProblem(f"{where}: 'data' must be base64 text")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise MessageProblem(f"{where}: 'data' is not valid base64") from None


def _templated(block: dict[str, Any]) -> list[str]:
    """The template strings of a content block."""
    kind = block["type"]
    if kind == "text":
        return [block["text"]]
    if kind == "resource":
        resource = block["resource"]
        return [resource["uri"], resource.get("text", "")]
    if kind == "resource_link":
        return [block["uri"]]
    return []


def check_messages(messages: Any, argument_names: set[str]) -> None:
    """Raise MessageProblem unless ``messages`` is a list of PromptMessage objects whose
    templates only use declared argument names."""
    if not isinstance(messages, list) or not messages:
        raise MessageProblem("messages must be a non-empty JSON list of {role, content} objects")
    if len(messages) > MAX_MESSAGES:
        raise MessageProblem(f"at most {MAX_MESSAGES} messages")
    for number, message in enumerate(messages, start=1):
        where = f"message #{number}"
        if not isinstance(message, dict) or set(message) - {"role", "content"}:
            raise MessageProblem(f"{where}: an object with 'role' and 'content'")
        if message.get("role") not in ROLES:
            raise MessageProblem(f"{where}: 'role' must be 'user' or 'assistant'")
        block = message.get("content")
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            raise MessageProblem(f"{where}: 'content' must be a block of type {', '.join(BLOCK_TYPES)}")
        kind = block["type"]
        if kind == "text" and not isinstance(block.get("text"), str):
            raise MessageProblem(f"{where}: a text block needs 'text'")
        if kind in ("image", "audio"):
            _check_base64(block.get("data"), where)
            if not isinstance(block.get("mimeType"), str) or not block["mimeType"].startswith(f"{kind}/"):
                raise MessageProblem(f"{where}: 'mimeType' must be an {kind}/… type")
        if kind == "resource":
            resource = block.get("resource")
            if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
                raise MessageProblem(f"{where}: 'resource' needs a 'uri'")
            if ("text" in resource) == ("blob" in resource):
                raise MessageProblem(f"{where}: 'resource' needs either 'text' or 'blob'")
            if "text" in resource and not isinstance(resource["text"], str):
                raise MessageProblem(f"{where}: the resource's 'text' must be a string")
            if "blob" in resource:
                _check_base64(resource["blob"], where)
        if kind == "resource_link" and not (isinstance(block.get("uri"), str) and isinstance(block.get("name"), str)):
            raise MessageProblem(f"{where}: a resource link needs 'uri' and 'name'")
        for template in _templated(block):
            unknown = template_names(template) - argument_names
            if unknown:
                raise MessageProblem(f"{where}: uses undeclared arguments {sorted(unknown)}")


def render_messages(messages: list[dict[str, Any]], arguments: dict[str, str]) -> list[dict[str, Any]]:
    """The PromptMessages with their templates filled in (``messages`` passed check_messages)."""
    rendered = []
    for message in messages:
        block = dict(message["content"])
        kind = block["type"]
        if kind == "text":
            block["text"] = render(block["text"], arguments)
        elif kind == "resource":
            resource = dict(block["resource"])
            resource["uri"] = render(resource["uri"], arguments)
            if "text" in resource:
                resource["text"] = render(resource["text"], arguments)
            block["resource"] = resource
        elif kind == "resource_link":
            block["uri"] = render(block["uri"], arguments)
        rendered.append({"role": message["role"], "content": block})
    return rendered
