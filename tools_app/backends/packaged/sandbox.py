"""Placeholder of the sandbox's agreed interface (the "sandbox" branch owns this module and
replaces it at merge): no isolation, so untrusted packages are refused unless the operator
opts out with ``TOOLBAY_SANDBOX_OPTOUT``."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings


@dataclass(frozen=True)
class SandboxSpec:
    package_dir: Path
    argv: list[str]
    env: dict[str, str]
    allow_hosts: tuple[str, ...] = ()
    memory_bytes: int = 512 * 2**20
    cpu_seconds: int = 300
    max_processes: int = 64
    max_open_files: int = 256
    max_file_bytes: int = 64 * 2**20
    max_line_bytes: int = 16 * 2**20
    ro_paths: tuple[Path, ...] = field(default=())
    home_dir: Path | None = None


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    mechanism: str
    reason: str


class SandboxUnavailable(Exception):
    """No sandbox on this machine and the package is untrusted (the message says why)."""


def sandbox_status() -> SandboxStatus:
    return SandboxStatus(False, "none", "this build has no sandbox")


async def spawn(spec: SandboxSpec, *, trusted: bool = False) -> asyncio.subprocess.Process:
    if not trusted and not settings.TOOLBAY_SANDBOX_OPTOUT:
        raise SandboxUnavailable("no sandbox is available and TOOLBAY_SANDBOX_OPTOUT is not set")
    home = spec.home_dir or Path(tempfile.mkdtemp(prefix="toolbay-home-"))
    env = {"HOME": str(home), **spec.env}
    return await asyncio.create_subprocess_exec(
        *spec.argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(spec.package_dir),
        start_new_session=True,
    )
