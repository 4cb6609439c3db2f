"""The sandbox packaged MCP servers run in (interface; the implementation follows).

``spawn(spec)`` starts ``spec.argv`` inside bubblewrap and returns the asyncio process with
stdin/stdout/stderr pipes (stdout carries the MCP stdio stream). The caller (the runner)
owns the process: it must drain stdout and stderr, and ``terminate()``/``wait()`` it.
Killing the returned process (bwrap) kills everything inside (``--die-with-parent`` and
the PID namespace).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path


class SandboxUnavailable(Exception):
    """No sandbox on this machine and the package is untrusted (the message says why)."""


@dataclass(frozen=True)
class SandboxSpec:
    package_dir: Path  # the installed package, mounted read-only at the same path inside
    argv: list[str]  # command to run inside (absolute paths as seen from inside)
    env: dict[str, str]  # the whole environment inside (nothing is inherited)
    allow_hosts: tuple[str, ...] = ()  # "host" (ports 80, 443) or "host:port"; empty: no network
    memory_bytes: int = 512 * 2**20
    cpu_seconds: int = 300
    max_processes: int = 64
    max_open_files: int = 256
    # Largest file the server may write, and the size of its private tmpfs (/tmp and home).
    max_file_bytes: int = 64 * 2**20
    # Longest line the returned process's stdout StreamReader accepts (readline raises beyond).
    max_line_bytes: int = 16 * 2**20
    # Further read-only mounts the command needs (its interpreter when not under /usr).
    ro_paths: tuple[Path, ...] = field(default=())
    # A writable directory mounted as the home (persistent per instance); None: a tmpfs.
    home_dir: Path | None = None


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    mechanism: str  # "bubblewrap" or "none"
    reason: str  # why not available, or a short description of what is used


def sandbox_status() -> SandboxStatus:
    raise NotImplementedError


async def spawn(spec: SandboxSpec, *, trusted: bool = False) -> asyncio.subprocess.Process:
    """Start ``spec.argv`` sandboxed. Raises SandboxUnavailable when no sandbox is available
    and ``trusted`` is False, unless ``settings.TOOLBAY_SANDBOX_OPTOUT`` is set (then it
    runs unsandboxed, with the clean environment and the limits)."""
    raise NotImplementedError
