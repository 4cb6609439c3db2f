"""Signed-cursor pages of a list, as ``tools/list`` pages (``mcp_platform.mcp.cursor``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_platform.mcp.cursor import CursorCodec
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, JsonRpcError


@dataclass(frozen=True)
class Pager:
    cursors: CursorCodec
    page_size: int

    def offset(self, params: dict[str, Any], scope: str) -> int:
        """Where a list continues: 0 without a cursor; -32602 for one not issued for ``scope``."""
        cursor = params.get("cursor")
        if cursor is None:
            return 0
        try:
            return self.cursors.decode(cursor, scope=scope)
        except (ValueError, TypeError):
            raise JsonRpcError(INVALID_PARAMS, "Invalid cursor") from None

    def page(
        self, items: Sequence[Mapping[str, Any]], params: dict[str, Any], *, key: str, scope: str
    ) -> dict[str, Any]:
        """``{key: <this page>, "nextCursor"?: …}``; a cursor not issued for ``scope`` is -32602."""
        offset = self.offset(params, scope)
        end = offset + self.page_size
        result: dict[str, Any] = {key: items[offset:end]}
        if end < len(items):
            result["nextCursor"] = self.cursors.encode(end, scope=scope)
        return result
