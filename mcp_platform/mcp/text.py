"""Text that cannot go everywhere: one rule, decided here, for every place it matters.

- **Lone surrogates** (``"\\ud800"``) are not Unicode scalar values: no UTF-8 encoding
  exists for them. Parsing refuses them in requests (orjson, -32700); text a tool produces
  with one has it replaced by U+FFFD on the way out, so output is always valid UTF-8 JSON.
- **NUL** (U+0000) is valid JSON and valid UTF-8, and travels on the wire untouched: a
  call with NUL in its arguments or its result works. PostgreSQL cannot store it (neither
  in ``text`` nor in ``jsonb``), so every copy that goes into the database (audit rows,
  a background run's arguments and result, quarantined payloads) stores it *escaped*, as
  the six characters ``\\u0000``, the way JSON writes it. A background tool, which reads its
  arguments from the stored run, receives that escape in place of the NUL.
"""

from __future__ import annotations

import re
from typing import Any

ESCAPED_NUL = "\\u0000"
_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str, escape_nul: bool) -> str:
    text = _SURROGATE.sub("\ufffd", text)
    return text.replace("\x00", ESCAPED_NUL) if escape_nul else text


def _map(value: Any, escape_nul: bool) -> Any:
    if isinstance(value, str):
        return _clean(value, escape_nul)
    if isinstance(value, dict):
        return {
            (_clean(key, escape_nul) if isinstance(key, str) else key): _map(item, escape_nul)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_map(item, escape_nul) for item in value]
    return value


def unstorable(value: Any) -> bool:
    """Whether some string or key of ``value`` holds a NUL or a lone surrogate: what an
    admin configures is refused with that, since it would not read back as written."""
    if isinstance(value, str):
        return "\x00" in value or _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(unstorable(key) or unstorable(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(unstorable(item) for item in value)
    return False


def encodable(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD in every string and key."""
    return _map(value, escape_nul=False)


def storable(value: Any) -> Any:
    """``value`` as the database may store it: lone surrogates replaced, NUL escaped."""
    return _map(value, escape_nul=True)
