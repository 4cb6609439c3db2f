"""ToolContext: what a running handler can do besides returning a result.

The same interface serves inline calls (in the ASGI process) and calls run on Celery
workers; only the ``CallLink`` behind it differs.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from audit.models import ConfirmationOutcome, Outcome
from mcp_platform.mcp import loglevels
from mcp_platform.mcp.calls import CallLink, ClientRequestError, ContinueAsTask, MissingClientCapability
from tenants.principal import Principal
from tools_app.backends import connections
from tools_app.backends.results import ToolError


@dataclass(frozen=True)
class Caller:
    """Who made the call, as an operator approving it sees them."""

    tenant_id: int
    label: str
    key_id: int | None = None
    oauth_subject: str = ""
    run_id: str = ""  # the run that waits, on a worker
    subject: str = ""  # the principal's stable subject (what connections are bound to)
    oauth_issuer: str = ""
    grant_id: str = ""  # a token of the embedded authorization server: its consent
    # The OAuth caller's own token, for RFC 8693 token exchange; in-process calls only (a
    # worker's caller has none: the token is never queued).
    bearer: str = field(default="", repr=False, compare=False)


def caller_of(principal: Principal) -> Caller:
    """Who calls, from the request's principal (in-process calls, reads and prompts)."""
    return Caller(
        tenant_id=principal.tenant_id,
        label=principal.label,
        key_id=principal.key_id,
        oauth_subject=principal.oauth_subject,
        subject=principal.subject,
        grant_id=principal.grant_id,
        oauth_issuer=principal.oauth_issuer,
        bearer=principal.bearer,
    )


@dataclass(frozen=True)
class ConfirmationRecord:
    """What became of the confirmation a call needed, for its invocation row."""

    outcome: ConfirmationOutcome
    decided_by: str = ""
    decided_at: float | None = None

    @classmethod
    def decided(cls, outcome: ConfirmationOutcome, by: str) -> ConfirmationRecord:
        return cls(outcome, by, time.time())

    def row_fields(self) -> dict[str, Any]:
        return {"confirmation": self.outcome, "confirmed_by": self.decided_by, "confirmed_at": self.decided_at}


class ToolContext:
    def __init__(
        self, link: CallLink, *, tool_name: str, confirmation: str, caller: Caller | None = None, call_id: str = ""
    ) -> None:
        """``confirmation``: the policy that applies to this caller (see
        ``tools_app.runs.confirmation``); ``caller``: who asks, for an operator's approval."""
        self._link = link
        self.tool_name = tool_name
        self.confirmation = confirmation
        self.caller = caller
        self.confirmation_record: ConfirmationRecord | None = None
        self._last_progress: float | None = None
        # Whether the handler's code has really returned (a blocking handler keeps running in
        # its thread after its awaiting task was cancelled): a flag, and the threading.Event
        # behind ``handler_returned`` only once someone waits for it or a thread sets it. An
        # Event costs a Condition (three caught AttributeErrors) per call, and only a worker
        # or a blocking handler ever uses it.
        self._returned = False
        self._returned_event: threading.Event | None = None
        self.blocking = False  # True: the handler runs in a thread and sets handler_returned itself
        # How the call ended, for the invocation log (set by tools_app.runs.execution.execute).
        self.outcome = Outcome.COMPLETED
        self.error_message = ""
        # Names this call to the APIs it reaches (the jti of a signed caller assertion); the
        # runtime gives the invocation row's call id.
        self.call_id = call_id or uuid.uuid4().hex
        # The user's connection the call acted with, for its invocation row.
        self.connection_used = ""

    @property
    def handler_returned(self) -> threading.Event:
        """Set once the handler's code has really returned. Take it in the event loop's
        thread (a blocking backend takes it before it starts its thread, and sets it there)."""
        if self._returned_event is None:
            self._returned_event = threading.Event()
            if self._returned:
                self._returned_event.set()
        return self._returned_event

    def handler_running(self, running: bool) -> None:
        """The runtime's marks around each attempt of an awaited backend call."""
        self._returned = not running
        if self._returned_event is not None:
            if running:
                self._returned_event.clear()
            else:
                self._returned_event.set()

    @property
    def cancelled(self) -> bool:
        """True once the client cancelled the call; long handlers should check it and stop."""
        return self._link.cancelled.is_set()

    async def wait_cancelled(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self._link.cancelled.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send notifications/progress if the client asked for it (a progressToken)."""
        if self._link.progress_token is None:
            return
        if self._last_progress is not None and progress <= self._last_progress:
            raise ValueError(f"progress must increase (was {self._last_progress}, got {progress})")
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": self._link.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._link.notify("notifications/progress", params)

    async def log(self, level: str, data: Any, *, logger: str | None = None) -> None:
        """Send notifications/message when the session's log level lets it through."""
        if not loglevels.is_level(level):
            raise ValueError(f"unknown log level {level!r}")
        if not self._link.log_enabled(level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._link.notify("notifications/message", params)

    def supports(self, capability: str) -> bool:
        """Whether the client declared ``capability`` ("elicitation", "sampling", "roots")."""
        return capability in self._link.client_capabilities

    def supports_forms(self) -> bool:
        """Whether the client can show an elicitation form (``elicitation: {}`` means form only)."""
        declared = self._link.client_capabilities.get("elicitation")
        if not isinstance(declared, dict):
            return False
        return "form" in declared or "url" not in declared

    @property
    def client_name(self) -> str:
        return str(self._link.client_info.get("name") or "")

    async def elicit(self, message: str, requested_schema: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        """Ask the user for input (form mode); returns ``{action, content?}``.

        ``key`` names the request on the 2026-07-28 leg, where it is asked through a
        multi-round result and the handler runs again with the answer (code before it runs
        again too: keep it free of side effects).
        """
        self._require(
            "elicitation", "This tool needs to ask the user for input, but the client does not support elicitation."
        )
        return await self._client_request(
            "elicitation/create", {"message": message, "requestedSchema": requested_schema}, key
        )

    async def sample(
        self, messages: list[dict[str, Any]], *, max_tokens: int, key: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Ask the client's model for a completion (sampling/createMessage)."""
        self._require("sampling", "This tool needs the client's model (sampling), but the client does not support it.")
        return await self._client_request(
            "sampling/createMessage", {"messages": messages, "maxTokens": max_tokens, **options}, key
        )

    async def list_roots(self, *, key: str | None = None) -> list[dict[str, Any]]:
        """The client's roots (roots/list): ``[{uri, name?}]``."""
        self._require("roots", "This tool needs the client's roots, but the client does not support roots.")
        answer = await self._client_request("roots/list", {}, key)
        roots = answer.get("roots")
        return [root for root in roots if isinstance(root, dict)] if isinstance(roots, list) else []

    @property
    def connection_caller(self) -> connections.Caller | None:
        """Whom per-user connections are looked up for (None: a call with no caller)."""
        caller = self.caller
        if caller is None or not caller.subject:
            return None
        return connections.Caller(
            tenant_id=caller.tenant_id,
            subject=caller.subject,
            label=caller.label,
            key_id=caller.key_id,
            oauth_subject=caller.oauth_subject,
            grant_id=caller.grant_id,
            oauth_issuer=caller.oauth_issuer,
            bearer=caller.bearer,
        )

    def url_elicitation(self) -> str:
        """How this call can send the user to a URL: ``request`` (a URL-mode elicitation the
        client declared; on 2026-07-28 through a multi-round result), ``error`` (2025-11-25
        clients that elicit but not by URL: error -32042 carries it), or ``none``."""
        declared = self._link.client_capabilities.get("elicitation")
        if isinstance(declared, dict) and "url" in declared:
            return "request"
        if isinstance(declared, dict) and self._link.protocol_version == "2025-11-25":
            return "error"
        return "none"

    def elicitation_session(self) -> str:
        """The session to tell with ``notifications/elicitation/complete`` once a URL-mode
        elicitation of this call is done: a 2025-11-25 session that can get the URL (by
        request or by -32042); "" elsewhere (2026-07-28 has no such notification: the
        client retries)."""
        if self._link.stateless or self._link.protocol_version != "2025-11-25" or not self._link.session_id:
            return ""
        return self._link.session_id if self.url_elicitation() != "none" else ""

    async def elicit_url(self, params: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        """Send the user to ``params["url"]`` (URL-mode elicitation); returns ``{action}``."""
        return await self._client_request("elicitation/create", params, key)

    def _require(self, capability: str, refusal: str) -> None:
        if self.supports(capability):
            return
        if self._link.stateless:
            # 2026-07-28: a protocol error naming the capability the request must declare.
            raise MissingClientCapability(capability)
        raise ToolError(refusal)

    def continue_as_task(self) -> None:
        """Go on as a task, if this call can become one; otherwise just go on.

        On the 2026-07-28 leg, when the request declared the tasks extension and the tool
        supports tasks, the call ends here and the client gets a task (``resultType:
        "task"``): the handler runs again from the start on a worker, with the answers it
        gathered so far (``ctx.elicit`` returns them at once), and this call returns there.
        Anywhere else (a legacy session, a client without tasks, already on a worker) it
        returns at once and the call continues where it is.
        """
        if self._link.may_become_task:
            raise ContinueAsTask()

    async def close_stream(self) -> None:
        """End the HTTP response now; the client reconnects and gets later events (SEP-1699)."""
        await self._link.close_stream()

    async def _client_request(self, method: str, params: dict[str, Any], key: str | None) -> dict[str, Any]:
        try:
            return await self._link.request(method, params, key)
        except ClientRequestError as exc:
            raise ToolError(f"The client could not complete {method}: {exc}") from None
