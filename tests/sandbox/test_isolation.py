"""The sandbox hides the machine: @modelcontextprotocol/server-filesystem (from npm), given
``/`` as its root and driven by the official SDK client, reads only its own sandbox.

Each forbidden file exists on the host (the test reads it there first) and the positive
control (a file in the instance's own home) is read through the same tool, so a failure to
read means the sandbox hid it, not that the tool or the path was wrong.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from tools_app.backends.packaged.sandbox import SandboxSpec, spawn


def _spec(package: Path, home: Path, env: dict[str, str]) -> SandboxSpec:
    entry = package / "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    return SandboxSpec(package_dir=package, argv=["/usr/bin/node", str(entry), "/"], env=env, home_dir=home)


async def test_filesystem_server_given_root_reads_only_its_own_sandbox(
    filesystem_server, stdio_session, text_of, tmp_path, monkeypatch
):
    marker = secrets.token_hex(8)
    # What the platform holds: the database file in the project, secret keys in a file and
    # in the runner's own environment.
    database = Path(settings.BASE_DIR) / f".sandbox-test-{secrets.token_hex(4)}.sqlite3"
    database.write_text(f"SQLite format 3 {marker}")
    secrets_file = tmp_path / "toolbay.env"
    secrets_file.write_text(f"TOOLBAY_SECRET_KEYS=key-{marker}\nDATABASE_URL=postgres://x:pw-{marker}@db/x\n")
    monkeypatch.setenv("TOOLBAY_SECRET_KEYS", f"env-key-{marker}")
    # Two tenants' instances of the same package, each with its home and its secret.
    instances = Path(tempfile.mkdtemp(prefix="toolbay-instances-"))
    instances.chmod(0o711)  # the sandbox's uid reaches the homes it is given, lists nothing
    homes = {name: instances / name for name in ("tenant-a", "tenant-b")}
    for name, home in homes.items():
        home.mkdir()
        home.chmod(0o777)  # the sandbox's uid writes it
        (home / "notes.txt").write_text(f"{name} {marker}")
    forbidden = {
        "database": str(database),
        "secrets file": str(secrets_file),
        "other tenant's file": str(homes["tenant-b"] / "notes.txt"),
        "shadow": "/etc/shadow",
    }
    for path in forbidden.values():
        assert Path(path).read_bytes()  # each exists and is readable on the host
    try:
        tenant_b = await spawn(_spec(filesystem_server, homes["tenant-b"], {"TENANT_SECRET": f"b-{marker}"}))
        async with stdio_session(tenant_b) as b:
            await b.session.list_tools()  # B is up: its process exists while A looks for it
            process = await spawn(_spec(filesystem_server, homes["tenant-a"], {"TENANT_SECRET": f"a-{marker}"}))
            async with stdio_session(process) as a:
                own = await a.session.call_tool("read_text_file", {"path": "/home/sandbox/notes.txt"})
                assert not own.is_error and f"tenant-a {marker}" in text_of(own)

                for what, path in forbidden.items():
                    result = await a.session.call_tool("read_text_file", {"path": path})
                    text = text_of(result)
                    assert result.is_error and marker not in text, f"the sandbox let it read the {what}: {text}"

                listing = text_of(await a.session.call_tool("list_directory", {"path": "/"}))
                assert "work" not in listing and "root" not in listing, listing

                # Every process it can see is its own: B's environment is nowhere in /proc.
                procs = text_of(await a.session.call_tool("list_directory", {"path": "/proc"}))
                pids = [line.split()[-1] for line in procs.splitlines() if line.split()[-1].isdigit()]
                assert 1 <= len(pids) <= 4, procs
                for pid in pids:
                    environ = await a.session.call_tool("read_text_file", {"path": f"/proc/{pid}/environ"})
                    assert f"b-{marker}" not in text_of(environ)
                    assert f"env-key-{marker}" not in text_of(environ)
                mine = text_of(await a.session.call_tool("read_text_file", {"path": "/proc/self/environ"}))
                assert f"a-{marker}" in mine and "TOOLBAY_SECRET_KEYS" not in mine and "DATABASE_URL" not in mine

                # Read-only system and package; writable home.
                for path in ("/usr/evil", str(filesystem_server / "evil"), "/etc/passwd"):
                    write = await a.session.call_tool("write_file", {"path": path, "content": "x"})
                    assert write.is_error, path
                wrote = await a.session.call_tool("write_file", {"path": "/home/sandbox/out.txt", "content": marker})
                assert not wrote.is_error
        assert (homes["tenant-a"] / "out.txt").read_text() == marker
        assert not (homes["tenant-b"] / "out.txt").exists()
    finally:
        database.unlink()
        shutil.rmtree(instances)
