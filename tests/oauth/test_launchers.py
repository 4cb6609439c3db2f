"""Every way Toolbay's ASGI server is launched passes ``TOOLBAY_TRUSTED_PROXIES`` to uvicorn:
its own default trusts X-Forwarded-* from 127.0.0.1, so any local client could turn the
advertised issuer into https:// (``test_grant_lifecycle`` checks a server started this way)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = ["scripts/run.sh", "deploy/Procfile", "deploy/Dockerfile", "conformance/auth.sh", "conformance/run.sh"]
TRUSTED = re.compile(r'--forwarded-allow-ips \\?"\$\{TOOLBAY_TRUSTED_PROXIES:-\}\\?"')


def _uvicorn_commands(text: str) -> list[str]:
    """Each command that starts ``mcp_platform.asgi:application``, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if "mcp_platform.asgi:application" in line and "uvicorn" in line]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_uvicorn_trusts_forwarded_headers_only_from_configured_proxies(launcher):
    commands = _uvicorn_commands((ROOT / launcher).read_text())
    assert commands, f"no uvicorn command in {launcher}"
    for command in commands:
        assert TRUSTED.search(command), f"{launcher}: {command.strip()}"


def test_compose_passes_the_setting_on():
    assert "TOOLBAY_TRUSTED_PROXIES: ${TOOLBAY_TRUSTED_PROXIES:-}" in (ROOT / "deploy/compose.yaml").read_text()
