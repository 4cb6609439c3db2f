"""Stream ids: unique within a process and across forked processes, and valid in event ids."""

from __future__ import annotations

import os

from mcp_platform.mcp.events import parse_event_id
from mcp_platform.mcp.ids import UniqueIds


def test_ids_are_unique_and_fit_an_event_id() -> None:
    ids = UniqueIds("p")
    made = [ids.next() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(parse_event_id(f"{value}.1700000000000-0") == (value, "1700000000000-0") for value in made[-3:])


def test_a_forked_child_draws_its_own_prefix() -> None:
    ids = UniqueIds("p")
    parent = ids.next()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its first id and leave at once
        os.write(write, ids.next().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    # Same counter position as the parent's next id would have, but another process prefix.
    assert child[1:13] != parent[1:13]
