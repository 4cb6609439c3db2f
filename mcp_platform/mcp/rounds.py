"""Client input for a multi-round request (MRTR, protocol revision 2026-07-28).

A handler that asks its client (elicitation, sampling, roots) does not wait for an answer
on this revision: the round ends with ``input_required`` and the client's retry runs the
handler again, with the answers (``mcp_platform.mcp.stateless``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_platform.mcp.calls import InputRequired


def _answer_fits(method: str, answer: Any) -> bool:
    """Whether a client's answer has the shape of a result of ``method`` (else it is asked again)."""
    if not isinstance(answer, dict):
        return False
    if method == "elicitation/create":
        content = answer.get("content")
        acted = answer.get("action") in ("accept", "decline", "cancel")
        return acted and (content is None or isinstance(content, dict))
    if method == "sampling/createMessage":
        return isinstance(answer.get("role"), str) and "content" in answer and isinstance(answer.get("model"), str)
    if method == "roots/list":
        return isinstance(answer.get("roots"), list)
    return True


class InputRound:
    """Client input for one execution of a multi-round request (MRTR, 2026-07-28).

    The handler runs again on every round, from the start: a request it makes gets the
    answer the client gave for its key in an earlier round, if there is one. Keys are the
    handler's own (``ctx.elicit(..., key="user_name")``) or numbered per kind in the order
    the requests are made, which is the same on every round. Requests without an answer
    are collected in ``pending``; the first one ends the round (``InputRequired``) after one
    turn of the event loop, so requests the handler started together (``asyncio.gather``)
    are all asked in the same round.
    """

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.pending: dict[str, dict[str, Any]] = {}
        self._counts: dict[str, int] = {}
        self._parked: list[asyncio.Future[None]] = []

    async def ask(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        if key is None:
            kind = method.split("/", 1)[0]
            self._counts[kind] = self._counts.get(kind, 0) + 1
            key = f"{kind}-{self._counts[kind]}"
        answer = self.answers.get(key)
        if isinstance(answer, dict) and _answer_fits(method, answer):
            return dict(answer)
        self.pending[key] = {"method": method, "params": params}
        if len(self.pending) == 1:
            await asyncio.sleep(0)  # one turn: requests started together join this round
            raise InputRequired()
        parked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append(parked)
        await parked  # the first request ends the round; this one is cancelled with the call
        raise InputRequired()

    def close(self) -> None:
        for parked in self._parked:
            parked.cancel()
