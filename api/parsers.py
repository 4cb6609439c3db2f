"""The REST API's JSON parser: strict, like the MCP endpoint's.

DRF's own parser is Python's ``json``, which accepts what is not JSON text a server can
answer with or store: lone surrogate escapes (``"\\ud800"``: no UTF-8 exists for them, so
PostgreSQL and the UTF-8 renderer both fail on them, as a 500), and ``NaN``/``Infinity``.
orjson refuses both; the client gets 400 with the parse error instead.
"""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return orjson.loads(stream.read() if stream is not None else b"")
        except orjson.JSONDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
