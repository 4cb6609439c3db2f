"""Who is calling: the resolved identity behind one MCP request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: int
    tenant_slug: str
    key_id: int | None  # None for an anonymous caller on a public tenant
    key_name: str
    key_prefix: str
    scopes: frozenset[str]

    @property
    def label(self) -> str:
        return "anonymous" if self.key_id is None else f"{self.key_name} ({self.key_prefix})"

    @property
    def subject(self) -> str:
        """Stable id of the credential; sessions and tasks are bound to it."""
        return f"{self.tenant_id}:anon" if self.key_id is None else f"{self.tenant_id}:key:{self.key_id}"
