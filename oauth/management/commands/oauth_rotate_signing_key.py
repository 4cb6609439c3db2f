"""``manage.py oauth_rotate_signing_key``: a new signing key for the embedded authorization
server. The key that signed until now keeps verifying (its tokens stay good until they
expire); older ones are retired. Rotate at most once per access-token lifetime."""

from __future__ import annotations

from typing import Any

from mcp_platform.commands import AuditedCommand
from oauth.signing import rotate


class Command(AuditedCommand):
    help = "Make a new signing key for the embedded authorization server (the previous one still verifies)."

    def handle(self, *args: Any, **options: Any) -> None:
        key = rotate()
        self.stdout.write(f"New signing key {key.kid} ({key.algorithm}).")
