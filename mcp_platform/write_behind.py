"""What ``manage.py audit_writer`` writes behind besides the invocation journal.

An app whose rows go through Redis first (background runs: ``tools_app.runs.writer``)
registers its writer's loop here when Django starts; the command runs each on a thread of
its own, so the one process every deployment already runs drains every stream.
"""

from __future__ import annotations

from collections.abc import Callable

Loop = Callable[[Callable[[], bool]], None]  # runs until the callable says stop

_loops: dict[str, Loop] = {}


def register(name: str, loop: Loop) -> None:
    _loops[name] = loop


def registered() -> dict[str, Loop]:
    return dict(_loops)
