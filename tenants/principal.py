"""Who is calling: the resolved identity behind one MCP request.

Three kinds of caller: an API key (``key_id`` set), an OAuth access token (``oauth_subject``
set: the subject, issuer, client and groups its claims map to) and an anonymous caller of a
public tenant (neither).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: int
    tenant_slug: str
    key_id: int | None  # None for OAuth and anonymous callers
    key_name: str
    key_prefix: str
    scopes: frozenset[str]
    # OAuth callers: the subject claim, the issuer that vouches for it, the client the token
    # was issued to, the groups (or roles) claim, when the token expires (Unix seconds) and,
    # for tokens of the embedded authorization server, the grant (consent) it belongs to.
    oauth_subject: str = ""
    oauth_issuer: str = ""
    oauth_client: str = ""
    groups: frozenset[str] = frozenset()
    expires_at: float | None = None
    grant_id: str = ""
    oauth_resource: str = ""  # the MCP URL the token was checked against (its audience)
    # An OAuth caller's own access token, kept for this request only: RFC 8693 token exchange
    # sends it to the issuer it came from. Never shown, compared, logged or queued to a worker.
    bearer: str = field(default="", repr=False, compare=False)

    @property
    def is_oauth(self) -> bool:
        return bool(self.oauth_subject)

    @property
    def is_anonymous(self) -> bool:
        return self.key_id is None and not self.oauth_subject

    @property
    def label(self) -> str:
        if self.oauth_subject:
            client = f" via {self.oauth_client}" if self.oauth_client else ""
            return f"oauth {self.oauth_subject}{client}"[:150]
        return "anonymous" if self.key_id is None else f"{self.key_name} ({self.key_prefix})"

    @property
    def subject(self) -> str:
        """Stable id of the credential's owner; sessions and tasks are bound to it.

        For OAuth it is the (issuer, subject) pair, not the token: a refreshed token of the
        same subject keeps its sessions and tasks, another subject's token does not. Hashed
        so that it has a fixed length (runs store it) and names no one.
        """
        if self.oauth_subject:
            digest = hashlib.sha256(f"{self.oauth_issuer}\0{self.oauth_subject}".encode()).hexdigest()[:32]
            return f"{self.tenant_id}:oauth:{digest}"
        return f"{self.tenant_id}:anon" if self.key_id is None else f"{self.tenant_id}:key:{self.key_id}"
