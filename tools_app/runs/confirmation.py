"""The confirmation step: before a tool's backend runs, a person says yes when its policy
asks for it (``tools_app.catalog.confirmation``).

One step for every call: ``execute`` runs it first, in the ASGI process for inline tools
and on the worker for background ones, on both protocol revisions. The user is asked
through elicitation (a server→client request on the call's stream on 2025-11-25; a
multi-round ``input_required``, or the task's ``inputRequests``, on 2026-07-28); an
operator through the console (``tools_app.runs.approvals``). Anything but a yes ends the
call with an ``isError`` result the model can act on, and the backend never runs.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async

from audit.models import ConfirmationOutcome
from audit.redaction import redact_arguments
from tools_app.backends.results import ToolError, error_result
from tools_app.catalog.confirmation import Asker, asker
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.approvals import approval_open, approval_wait
from tools_app.runs.context import ConfirmationRecord, ToolContext
from tools_app.runs.models import Approval

# The multi-round key of the question (2026-07-28): the retry's answer under it is the user's.
CONFIRMATION_KEY = "toolbay.confirmation"
APPROVE, DENY = "approve", "deny"
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Run this tool?",
            "oneOf": [{"const": APPROVE, "title": "Approve"}, {"const": DENY, "title": "Deny"}],
        }
    },
    "required": ["decision"],
}
USER = "the client's user"


def display_name(tool: ToolSpec) -> str:
    return tool.title or tool.name


def confirmation_message(tool: ToolSpec, arguments: dict[str, Any]) -> str:
    """What the person is asked: the tool by its title, what it does, the arguments with
    sensitive ones redacted."""
    shown = json.dumps(redact_arguments(arguments, tool.input_schema), indent=2, ensure_ascii=False)
    return (
        f"Allow the tool “{display_name(tool)}” to run?\n\n{tool.description}\n\n"
        f"Arguments:\n{shown}\n\nApprove to run it now, deny to stop it."
    )


async def confirm(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any] | None:
    """None when the call may run; else the result that ends it (the backend does not run).

    Leaves what became of the confirmation in ``ctx.confirmation_record`` (``asked`` while
    it waits: a timeout or a multi-round ``input_required`` ends the call there).
    """
    who = asker(ctx.confirmation, tool.annotations)
    if who is Asker.NOBODY:
        return None
    if who is Asker.OPERATOR:
        return await _ask_operator(tool, arguments, ctx)
    return await _ask_user(tool, arguments, ctx)


def refusal(tool: ToolSpec, record: ConfirmationRecord, timeout_seconds: float) -> dict[str, Any]:
    """The result of a call that was not confirmed, in words the model can act on."""
    return unconfirmed_result(display_name(tool), record, timeout_seconds)


def unconfirmed_result(name: str, record: ConfirmationRecord, timeout_seconds: float) -> dict[str, Any]:
    """``refusal`` for the tool shown as ``name``."""
    texts = {
        ConfirmationOutcome.DECLINED: f"The {'operator' if record.decided_by != USER else 'user'} declined "
        f"to run “{name}”; it did not run. Do not retry it unless asked to.",
        ConfirmationOutcome.CANCELLED: f"The user dismissed the confirmation of “{name}”; it did not run.",
        ConfirmationOutcome.TIMED_OUT: f"Nobody confirmed “{name}” within {timeout_seconds:g} seconds; it did not run.",
        ConfirmationOutcome.REFUSED: f"“{name}” needs a person's confirmation before it runs, and this client "
        "cannot show one (it declares no elicitation forms); it did not run. Use a client that supports "
        "elicitation.",
    }
    return error_result(texts.get(record.outcome, f"“{name}” was not confirmed; it did not run."))


async def _ask_user(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any] | None:
    if not ctx.supports_forms():
        ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.REFUSED)
        return refusal(tool, ctx.confirmation_record, tool.timeout_seconds)
    ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.ASKED)
    try:
        answer = await ctx.elicit(confirmation_message(tool, arguments), DECISION_SCHEMA, key=CONFIRMATION_KEY)
    except ToolError:  # the client answered with an error: nobody said yes
        ctx.confirmation_record = ConfirmationRecord.decided(ConfirmationOutcome.CANCELLED, USER)
        return refusal(tool, ctx.confirmation_record, tool.timeout_seconds)
    content = answer.get("content")
    decision = content.get("decision") if isinstance(content, dict) else None
    if answer.get("action") == "accept" and decision == APPROVE:
        ctx.confirmation_record = ConfirmationRecord.decided(ConfirmationOutcome.GRANTED, USER)
        return None
    outcome = ConfirmationOutcome.CANCELLED if answer.get("action") == "cancel" else ConfirmationOutcome.DECLINED
    ctx.confirmation_record = ConfirmationRecord.decided(outcome, USER)
    return refusal(tool, ctx.confirmation_record, tool.timeout_seconds)


async def _ask_operator(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any] | None:
    # A 2026-07-28 client with the tasks extension waits as a task (on a worker), not on its stream.
    ctx.continue_as_task()
    if ctx.caller is None:  # a test call from the admin has no caller an operator could judge
        ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.REFUSED)
        return refusal(tool, ctx.confirmation_record, tool.timeout_seconds)
    approval = await sync_to_async(approval_open)(caller=ctx.caller, tool=tool, arguments=arguments)
    ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.ASKED)
    await ctx.log("notice", f"Waiting for an operator to approve “{display_name(tool)}”.", logger="toolbay")
    decided = await approval_wait(approval)
    who = await sync_to_async(_decider)(decided)
    if decided.status == Approval.Status.APPROVED:
        ctx.confirmation_record = ConfirmationRecord.decided(ConfirmationOutcome.GRANTED, who)
        return None
    if decided.status == Approval.Status.EXPIRED:  # a run started again after its wait had ended
        ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.TIMED_OUT)
    else:
        ctx.confirmation_record = ConfirmationRecord.decided(ConfirmationOutcome.DECLINED, who)
    return refusal(tool, ctx.confirmation_record, tool.timeout_seconds)


def _decider(approval: Approval) -> str:
    user = approval.decided_by
    return f"operator {user.get_username()}" if user is not None else "an operator"
