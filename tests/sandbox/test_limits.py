"""A sandboxed server that allocates, forks, spins, opens or writes without bound is stopped
by its limits, and the machine (the host, other sandboxes of the same uid) goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.poll import wait_for_async
from tools_app.backends.packaged import sandbox
from tools_app.backends.packaged.sandbox import SandboxSpec, SandboxUnavailable, sandbox_status, spawn

MB = 2**20


async def _run(spec: SandboxSpec, timeout: float = 30) -> tuple[int, str, str]:
    process = await spawn(spec)
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _still_works(package: Path) -> None:
    code, out, _ = await _run(
        SandboxSpec(package_dir=package, argv=["/usr/bin/python3", "-I", "-c", "print('ok')"], env={})
    )
    assert (code, out) == (0, "ok\n")


async def test_node_allocating_without_bound_ends(empty_package):
    started = time.monotonic()
    code, _, err = await _run(
        SandboxSpec(
            package_dir=empty_package,
            argv=["/usr/bin/node", "-e", "const a = []; for (;;) a.push(Buffer.alloc(16 * 2 ** 20, 1));"],
            env={},
            memory_bytes=256 * MB,
        )
    )
    # The limit stops it either in V8's heap ("out of memory") or when the next buffer's
    # memory is refused ("Array buffer allocation failed"), whichever comes first.
    stopped = "out of memory" in err.lower() or "array buffer allocation failed" in err.lower()
    assert code != 0 and stopped, err[-500:]
    assert time.monotonic() - started < 20
    await _still_works(empty_package)


async def test_python_allocating_without_bound_gets_memory_error(empty_package):
    script = "a = []\nwhile True: a.append(bytearray(16 * 2**20))"
    code, _, err = await _run(
        SandboxSpec(
            package_dir=empty_package, argv=["/usr/bin/python3", "-I", "-c", script], env={}, memory_bytes=256 * MB
        )
    )
    assert code == 1 and "MemoryError" in err


FORK_BOMB = r"""
import os, sys, time, json
forked = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        refused = str(exc)
        break
    if pid == 0:  # every child forks without bound too
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.05)
    forked += 1
print(json.dumps({"forked": forked, "refused": refused}), flush=True)
sys.stdin.readline()  # hold every slot until the test has looked around
"""


def _pid_namespace(bwrap_pid: int) -> str:
    """The PID namespace of the sandbox whose bubblewrap process is ``bwrap_pid``."""
    init = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()[0]
    return os.readlink(f"/proc/{init}/ns/pid")


def _processes_in(namespace: str) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # a process that ended meanwhile
                count += os.readlink(entry / "ns/pid") == namespace
    return count


async def test_fork_bomb_is_held_to_its_own_process_budget(empty_package):
    spec = SandboxSpec(
        package_dir=empty_package, argv=["/usr/bin/python3", "-I", "-c", FORK_BOMB], env={}, max_processes=32
    )
    process = await spawn(spec)
    assert process.stdout and process.stdin
    report = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
    assert "Resource temporarily unavailable" in report["refused"] and report["forked"] < 32
    namespace = _pid_namespace(process.pid)
    assert 20 <= _processes_in(namespace) <= 32  # the bomb holds its whole budget, and no more
    # Meanwhile another sandbox of the same uid starts, and so does a host process.
    await _still_works(empty_package)
    assert subprocess.run(["true"], check=False).returncode == 0
    process.stdin.close()  # the server ends; its PID namespace goes with it
    await asyncio.wait_for(process.wait(), 10)
    await wait_for_async(lambda: _processes_in(namespace) == 0, message="the bomb's processes all ended")


async def test_cpu_files_and_open_files_are_limited(empty_package):
    spin = await _run(
        SandboxSpec(
            package_dir=empty_package, argv=["/usr/bin/python3", "-I", "-c", "while True: pass"], env={}, cpu_seconds=1
        )
    )
    assert spin[0] != 0  # SIGXCPU after one second of CPU
    script = r"""
import json, os
out = {}
files = []
try:
    while True:
        files.append(open("/dev/null"))
except OSError as exc:
    out["open"] = [len(files), exc.strerror]
for f in files:
    f.close()
try:
    with open("/tmp/big", "wb") as f:
        for _ in range(4):
            f.write(b"x" * 2**20)
            f.flush()
except OSError as exc:
    out["write"] = exc.strerror
print(json.dumps(out))
"""
    _, out, _ = await _run(
        SandboxSpec(
            package_dir=empty_package,
            argv=["/usr/bin/python3", "-I", "-c", script],
            env={},
            max_open_files=64,
            max_file_bytes=2 * MB,
        )
    )
    seen = json.loads(out)
    assert seen["open"][0] < 64 and seen["open"][1] == "Too many open files"
    assert seen["write"] in ("File too large", "No space left on device")


async def test_a_line_longer_than_the_limit_is_refused_by_the_reader(empty_package):
    process = await spawn(
        SandboxSpec(
            package_dir=empty_package,
            argv=["/usr/bin/python3", "-I", "-c", "print('x' * 3 * 2**20)"],
            env={},
            max_line_bytes=MB,
        )
    )
    assert process.stdout
    with pytest.raises(ValueError, match="limit"):
        await process.stdout.readline()
    process.kill()
    await process.wait()


@pytest.fixture
def no_bubblewrap(settings):
    settings.TOOLBAY_SANDBOX_BWRAP = "/nonexistent/bwrap"
    sandbox_status.cache_clear()
    yield
    sandbox_status.cache_clear()


async def test_without_a_sandbox_untrusted_packages_are_refused_unless_opted_out(
    no_bubblewrap, settings, empty_package, monkeypatch
):
    monkeypatch.setenv("TOOLBAY_SECRET_KEYS", "never-inherited")
    status = sandbox_status()
    assert not status.available and "bubblewrap not found" in status.reason
    assert sandbox.sandbox_readiness() == "unavailable"
    spec = SandboxSpec(package_dir=empty_package, argv=["/usr/bin/env"], env={"GIVEN": "1"})
    with pytest.raises(SandboxUnavailable, match="TOOLBAY_SANDBOX_OPTOUT"):
        await spawn(spec)
    trusted = await spawn(spec, trusted=True)
    out, _ = await trusted.communicate()
    assert "GIVEN=1" in out.decode() and "TOOLBAY_SECRET_KEYS" not in out.decode()
    settings.TOOLBAY_SANDBOX_OPTOUT = True
    assert sandbox.sandbox_readiness() == "opted-out"
    opted_out = await spawn(spec)
    out, _ = await opted_out.communicate()
    assert "GIVEN=1" in out.decode() and "TOOLBAY_SECRET_KEYS" not in out.decode()


def test_readyz_says_which_sandbox(client, db, settings):
    assert client.get("/readyz").json()["sandbox"] == "bubblewrap"
    settings.TOOLBAY_SANDBOX_BWRAP = "/nonexistent/bwrap"
    sandbox_status.cache_clear()
    try:
        response = client.get("/readyz")
        assert response.status_code == 200 and response.json()["sandbox"] == "unavailable"
        settings.TOOLBAY_SANDBOX_OPTOUT = True
        assert client.get("/readyz").json()["sandbox"] == "opted-out"
    finally:
        sandbox_status.cache_clear()
