"""Ids that only need to be unique, made without a system call each.

A POST's stream id (and a 2026-07-28 request's stand-in session) is made for every request
but only ever read back if the response turns into a resumable stream. ``secrets`` reads the
kernel's randomness each time (a measurable share of a call's CPU); here a random prefix per
process, drawn again in a forked child, and a counter make ids no two processes share.
"""

from __future__ import annotations

import itertools
import os
import secrets


class UniqueIds:
    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._fresh()
        os.register_at_fork(after_in_child=self._fresh)

    def _fresh(self) -> None:
        self._process = secrets.token_hex(6)
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{self._process}{next(self._counter):x}"
