"""The platform side of the MCP engine (``mcp_platform.mcp.host.ToolHost``): identities,
tools, tasks, resources, prompts and completions, from the tenant directory, the catalog
and the runs."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings

from audit.journal import invocation_row, journal, new_call_id
from audit.models import Outcome
from mcp_platform import tracing
from mcp_platform.mcp.calls import CallLink, ContinueAsTask, InputRequired, MissingClientCapability
from mcp_platform.mcp.host import AuthError, Requester
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, SERVER_ERROR, JsonRpcError
from mcp_platform.mcp.relay import RELATED_TASK
from mcp_platform.mcp.shapes import CallToolResult, CreateTaskResult, DetailedTask, Task, Tool
from mcp_platform.redis_clients import command_batch
from tenants.auth import AuthFailure, TenantDirectory
from tenants.principal import Principal
from tools_app.catalog.cache import CatalogCache, VisibleSet
from tools_app.catalog.search import SEARCH_TOOL, SEARCH_TOOL_NAME, search_call
from tools_app.catalog.spec import ToolSpec
from tools_app.runs import content, limits, store
from tools_app.runs.context import ToolContext, caller_of
from tools_app.runs.delivery import relay
from tools_app.runs.dispatch import answer_task, call_in_background, create_task, start_task
from tools_app.runs.execution import argument_problem, execute
from tools_app.runs.models import ToolRun
from tools_app.runs.recovery import recover_run
from tools_app.runs.selectors import detailed_task_view, run_of, task_page, task_view
from tools_app.runs.services import cancel_run

TASK_NOT_FOUND = "Failed to retrieve task: Task not found"

# The limits check a request began with its credential check (``PlatformToolHost.call_ahead``).
_ADMISSION: contextvars.ContextVar[limits.Admission | None] = contextvars.ContextVar("admission", default=None)


@dataclass(frozen=True)
class Finished:
    """A call's result and how it ended; ``outcome`` is None when a worker ran it (and
    recorded it)."""

    result: Any
    outcome: Outcome | None
    message: str = ""


class PlatformToolHost:
    def __init__(self, directory: TenantDirectory, catalog: CatalogCache) -> None:
        self._directory = directory
        self._cache = catalog

    async def authenticate(self, endpoint: str, authorization: str | None, origin: str = "") -> Principal:
        started_ns = time.time_ns() if tracing.ENABLED else 0
        try:
            principal = await self._directory.authenticate(endpoint, authorization, origin)
        except AuthFailure as exc:
            if tracing.ENABLED:  # no request span follows a refused credential: this one stands alone
                with tracing.span("mcp.authenticate", parent=tracing.request_parent()) as span:
                    tracing.mark_error(span, exc.message)
            if exc.tenant_id is not None and journal.allow_denied(f"{exc.tenant_id}:refused"):
                await journal.append(
                    invocation_row(
                        tenant_id=exc.tenant_id,
                        key_id=None,
                        key_label="(refused credential)",
                        tool_name="",
                        outcome=Outcome.DENIED,
                        error_message=exc.message,
                        started_at=time.time(),
                    )
                )
            raise _auth_error(exc) from None
        if tracing.ENABLED:
            tracing.authenticated(started_ns)
            tracing.annotate(toolbay__tenant__id=principal.tenant_id, toolbay__credential=principal.label)
        return principal

    def call_ahead(self, endpoint: str, authorization: str | None) -> Callable[[], None] | None:
        """Send a call's limits check in the round trip that reads the tenant's generation (one
        wait less for a sequential caller), if the credential holds by the tenant's record as
        this process has it: a stranger's request takes no slot, not even for a moment.
        ``_take_slot`` uses it if that record is still current.

        Only while this process's Redis connection is idle, when the check's own round trip
        would be a wait of this caller's alone. With other requests' commands in flight it
        rides with theirs at no extra wake, and the head start's own work (about 10 µs of CPU
        a call, measured at 32 sessions) would buy nothing."""
        if not command_batch().idle:
            return None
        tenant = self._directory.admits(endpoint, authorization)
        if tenant is None or (tenant.calls_per_minute is None and tenant.max_concurrent_calls is None):
            return None

        def admit() -> None:
            _ADMISSION.set(limits.admit(tenant))

        return admit

    def request_ended(self) -> None:
        admission = _ADMISSION.get()
        if admission is not None:
            _ADMISSION.set(None)
            limits.give_back(admission)

    def authorize(self, identity: Principal, method: str) -> None:
        try:
            self._directory.authorize(identity, method)
        except AuthFailure as exc:
            raise _auth_error(exc) from None

    async def _tool(self, identity: Principal, name: str) -> ToolSpec | None:
        if name == SEARCH_TOOL_NAME and self._lists_by_search(identity):
            return None  # the search tool (a catalog tool of that name is out of reach in search mode)
        return (await self._cache.visible(identity)).by_name.get(name)

    def _lists_by_search(self, identity: Principal) -> bool:
        """Whether the caller's endpoint is in search mode (the tenant's setting or its key's)."""
        tenant = self._directory.cached(identity)
        return tenant is not None and tenant.lists_by_search(identity.key_prefix if identity.key_id else "")

    async def list_tools(self, identity: Principal) -> list[Tool]:
        visible = await self._cache.visible(identity)
        if self._lists_by_search(identity):
            listed = [SEARCH_TOOL, *(tool.wire for tool in visible.pinned if tool.name != SEARCH_TOOL_NAME)]
            return cast("list[Tool]", listed)
        return cast("list[Tool]", [tool.wire for tool in visible.tools])

    async def revalidate(self, identity: Principal) -> Principal | None:
        return await self._directory.revalidate(identity)

    async def header_params(self, identity: Principal, name: str) -> list[tuple[str, tuple[str, ...]]]:
        tool = await self._tool(identity, name)
        return list(tool.header_params) if tool is not None else []

    async def visible_digests(self, identity: Principal) -> Mapping[str, str]:
        visible = await self._cache.visible(identity)
        if self._lists_by_search(identity):  # the list is the search tool and the pinned tools
            return {**visible.digests, "tools": visible.search_digest}
        return visible.digests

    # --- resources, prompts, completion (tools_app.runs.content) ---------------------------

    async def list_resources(self, identity: Principal) -> list[dict[str, Any]]:
        return [resource.wire for resource in (await self._cache.visible(identity)).resources]

    async def list_resource_templates(self, identity: Principal) -> list[dict[str, Any]]:
        return [template.wire for template in (await self._cache.visible(identity)).templates]

    async def resource_exists(self, identity: Principal, uri: str) -> bool:
        return (await self._cache.visible(identity)).find_resource(uri) is not None

    async def read_resource(self, identity: Principal, uri: str, requester: Requester) -> dict[str, Any] | None:
        return await content.read_resource(identity, await self._cache.visible(identity), uri, requester)

    async def list_prompts(self, identity: Principal) -> list[dict[str, Any]]:
        return [prompt.wire for prompt in (await self._cache.visible(identity)).prompts]

    async def get_prompt(
        self, identity: Principal, name: str, arguments: dict[str, str], requester: Requester
    ) -> dict[str, Any] | None:
        return await content.get_prompt(identity, await self._cache.visible(identity), name, arguments, requester)

    async def complete(
        self, identity: Principal, ref: Mapping[str, Any], argument: str, value: str, context: Mapping[str, str]
    ) -> dict[str, Any] | None:
        return await content.complete(await self._cache.visible(identity), ref, argument, value, context)

    async def task_support(self, identity: Principal, name: str) -> str | None:
        if name == SEARCH_TOOL_NAME and self._lists_by_search(identity):
            return "forbidden"
        tool = await self._tool(identity, name)
        return tool.task_support if tool is not None else None

    async def call_tool(self, identity: Principal, name: str, arguments: dict[str, Any], link: CallLink) -> Any:
        visible = await self._cache.visible(identity)
        tool = visible.by_name.get(name)
        started_at, clock = time.time(), time.perf_counter()
        row = functools.partial(
            invocation_row,
            tenant_id=identity.tenant_id,
            key_id=identity.key_id,
            key_label=identity.label,
            oauth_subject=identity.oauth_subject,
            oauth_client=identity.oauth_client,
            session_id="" if link.stateless else link.session_id,  # 2026-07-28 calls have no session
            protocol_version=link.protocol_version,
            client=link.client_info,
            tool_name=name,
            arguments=arguments,
            started_at=started_at,
        )
        if tracing.ENABLED:
            tracing.annotate(toolbay__tenant__id=identity.tenant_id, toolbay__credential=identity.label)
            if link.session_id and link.stream_id and not link.stateless:
                # A resumption of this call's stream links to its span. Not awaited (the call
                # waits for no round trip of its own; it rides with the next commands sent); a
                # resumption that finds nothing only lacks the link.
                record = tracing.stream_record(link.session_id, link.stream_id, settings.MCP_EVENT_TTL_SECONDS)
                if record is not None:
                    command_batch().send([record])
        if name == SEARCH_TOOL_NAME and self._lists_by_search(identity):
            return await self._search(identity, visible, arguments, row, clock)
        if tool is None:
            if journal.allow_denied(identity.subject):
                await journal.append(row(outcome=Outcome.DENIED, error_message="Unknown or forbidden tool"))
            if tracing.ENABLED:
                tracing.annotate(toolbay__outcome=Outcome.DENIED)
            return None
        row = functools.partial(row, tool_id=tool.id, tool_version=tool.version, input_schema=tool.redacted_schema)
        try:
            holds_slot = await self._take_slot(identity)
        except limits.LimitExceeded as exc:
            await journal.append(row(outcome=Outcome.DENIED, error_message=exc.message))
            raise JsonRpcError(SERVER_ERROR, exc.message) from None
        finished: Finished | None = None
        policy = visible.confirmation(tool)
        call_id = new_call_id()
        row = functools.partial(row, call_id=call_id)
        ctx = ToolContext(link, tool_name=tool.name, confirmation=policy, caller=caller_of(identity), call_id=call_id)
        try:
            finished = await self._run(identity, tool, arguments, link, ctx)
        except asyncio.CancelledError:  # interrupted after the cancellation grace period
            finished = Finished(None, Outcome.CANCELLED)
            raise
        except InputRequired:  # a multi-round call's round that asks the client (2026-07-28)
            finished = Finished(None, Outcome.INPUT_REQUIRED, "Waiting for the client's input")
            raise
        except MissingClientCapability as exc:
            finished = Finished(None, Outcome.DENIED, f"The request did not declare the capability {exc.capability}")
            raise
        except JsonRpcError as exc:  # the handler ended the call with a protocol error
            finished = Finished(None, Outcome.FAILED, exc.message)
            raise
        finally:
            recorded = None
            if finished is not None and finished.outcome is not None:  # None: a worker ran it and records it
                outcome = Outcome.CANCELLED if link.cancelled.is_set() else finished.outcome
                confirmation = ctx.confirmation_record.row_fields() if ctx.confirmation_record is not None else {}
                recorded = row(
                    outcome=outcome,
                    error_message=finished.message,
                    duration_ms=_ms_since(clock),
                    connection=ctx.connection_used,
                    **confirmation,
                )
            # One round trip before answering: the row is in the journal once the client has its answer.
            if tracing.ENABLED and recorded is not None:
                tracing.annotate(toolbay__outcome=recorded["outcome"])
                with tracing.span("toolbay.audit.write"):
                    await self._end_call(identity.tenant_id, release_slot=holds_slot, record=recorded)
            else:
                await self._end_call(identity.tenant_id, release_slot=holds_slot, record=recorded)
        return finished.result

    async def _search(
        self,
        identity: Principal,
        visible: VisibleSet,
        arguments: dict[str, Any],
        row: Callable[..., dict[str, Any]],
        clock: float,
    ) -> dict[str, Any]:
        """A call of the search tool: counted against the tenant's limits and recorded like any
        call; it ranks only what ``visible`` holds (the caller's tools, as tools/list shows them)."""
        try:
            holds_slot = await self._take_slot(identity)
        except limits.LimitExceeded as exc:
            await journal.append(row(outcome=Outcome.DENIED, error_message=exc.message))
            raise JsonRpcError(SERVER_ERROR, exc.message) from None
        recorded = None
        try:
            # The index is built on a caller's first search (tenths of a second for a thousand
            # tools): in a thread, so the event loop serves other requests meanwhile.
            built = "search_index" in vars(visible)
            index = visible.search_index if built else await asyncio.to_thread(lambda: visible.search_index)
            result, problem = search_call(index, arguments)
            outcome = Outcome.INVALID_ARGUMENTS if problem else Outcome.COMPLETED
            recorded = row(outcome=outcome, error_message=problem, duration_ms=_ms_since(clock))
        finally:
            await self._end_call(identity.tenant_id, release_slot=holds_slot, record=recorded)
        return result

    async def recover_run(self, run_id: str, worker: str) -> None:
        await recover_run(run_id, worker)

    async def _end_call(self, tenant_id: int, *, release_slot: bool, record: dict[str, Any] | None) -> None:
        commands = [limits.release_command(tenant_id)] if release_slot else []
        recording = journal.commands(record) if record is not None else []
        if commands or recording:
            answers = await command_batch().run([*commands, *recording])
            journal.saw(recording, answers)

    @staticmethod
    async def _run(
        principal: Principal, tool: ToolSpec, arguments: dict[str, Any], link: CallLink, ctx: ToolContext
    ) -> Finished:
        if tracing.ENABLED:
            with tracing.span("toolbay.validate_arguments") as span:
                problem = argument_problem(tool, arguments)
                if problem is not None:
                    tracing.mark_error(span, "invalid arguments")
        else:
            problem = argument_problem(tool, arguments)
        if problem is not None:
            return Finished(problem, Outcome.INVALID_ARGUMENTS, problem["content"][0]["text"])
        # Outcome None: a worker runs it from here (confirmation included) and records it.
        confirmation = ctx.confirmation
        if tool.execution_mode == "background":
            if link.may_become_task:  # 2026-07-28 with the tasks extension: the server makes it a task
                return Finished(await start_task(principal, tool, arguments, link, confirmation), None)
            return Finished(await call_in_background(principal, tool, arguments, link, confirmation), None)
        try:
            result = await execute(tool, arguments, ctx)
        except ContinueAsTask:  # it gathered its input inline and goes on as a task
            return Finished(await start_task(principal, tool, arguments, link, confirmation), None)
        return Finished(result, ctx.outcome, ctx.error_message)

    async def _take_slot(self, identity: Principal) -> bool:
        tenant = self._directory.cached(identity)
        if tenant is None:
            return False
        admission = _ADMISSION.get()
        if admission is not None and not admission.used:
            if admission.tenant is tenant:  # the record its limits were read from is still current
                taken = await admission.take()
                if taken is not None:
                    return taken
            else:
                # Admitted by limits since changed: give it back before asking again, or its
                # slot would count against this very call.
                await asyncio.wait((admission.reply,))
                limits.give_back(admission)
        return await limits.acquire(
            identity.tenant_id, per_minute=tenant.calls_per_minute, concurrent=tenant.max_concurrent_calls
        )

    async def create_task(
        self, identity: Principal, name: str, arguments: dict[str, Any], link: CallLink, ttl_ms: int | None
    ) -> CreateTaskResult:
        visible = await self._cache.visible(identity)
        tool = visible.by_name.get(name)
        if tool is None:
            if journal.allow_denied(identity.subject):
                await journal.append(
                    invocation_row(
                        tenant_id=identity.tenant_id,
                        key_id=identity.key_id,
                        key_label=identity.label,
                        oauth_subject=identity.oauth_subject,
                        oauth_client=identity.oauth_client,
                        session_id=link.session_id,
                        client=link.client_info,
                        tool_name=name,
                        arguments=arguments,
                        outcome=Outcome.DENIED,
                        error_message="Unknown or forbidden tool",
                        started_at=time.time(),
                        is_task=True,
                    )
                )
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        tenant = self._directory.cached(identity)
        if tenant is not None:  # tasks count against the rate; they hold no call slot here
            try:
                await limits.acquire(identity.tenant_id, per_minute=tenant.calls_per_minute, concurrent=None)
            except limits.LimitExceeded as exc:
                raise JsonRpcError(SERVER_ERROR, exc.message) from None
        return cast(
            CreateTaskResult, await create_task(identity, tool, arguments, link, ttl_ms, visible.confirmation(tool))
        )

    async def get_task(self, identity: Principal, task_id: str) -> Task | None:
        run = await run_of(identity, task_id)
        return cast(Task, task_view(run)) if run is not None else None

    async def task_result(self, identity: Principal, task_id: str) -> CallToolResult:
        run = await run_of(identity, task_id)
        if run is None:
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        signals = relay()
        while not run.is_terminal:
            # Woken by the run's "done" signal; the timeout re-reads the row in case it was missed.
            await signals.wait_task_done(task_id, timeout_seconds=2)
            run = await store.load(task_id) or run
        related = {RELATED_TASK: {"taskId": run.id}}
        if run.status == ToolRun.Status.CANCELLED:
            raise JsonRpcError(SERVER_ERROR, f"Task {run.id} was cancelled", data={"_meta": related})
        if run.error is not None:
            raise JsonRpcError(
                run.error.get("code", SERVER_ERROR), run.error.get("message", "Task failed"), data=run.error.get("data")
            )
        return cast(CallToolResult, {**(run.result or {"content": []}), "_meta": related})

    async def list_tasks(self, identity: Principal, offset: int, limit: int) -> tuple[list[Task], bool]:
        runs = await task_page(identity, offset, limit)
        return cast("list[Task]", [task_view(run) for run in runs[:limit]]), len(runs) > limit

    async def detailed_task(self, identity: Principal, task_id: str) -> DetailedTask | None:
        run = await run_of(identity, task_id)
        return cast(DetailedTask, detailed_task_view(run)) if run is not None else None

    async def answer_task(self, identity: Principal, task_id: str, responses: dict[str, Any]) -> bool:
        run = await run_of(identity, task_id)
        if run is None:
            return False
        await answer_task(run, responses)
        return True

    async def stop_task(self, identity: Principal, task_id: str) -> bool:
        run = await run_of(identity, task_id)
        if run is None:
            return False
        await cancel_run(run.id, "Cancelled by the client (tasks/cancel)")  # a task that ended stays as it ended
        return True

    async def cancel_task(self, identity: Principal, task_id: str) -> Task:
        run = await run_of(identity, task_id)
        if run is None:
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        cancelled = await cancel_run(run.id, "Cancelled by the client (tasks/cancel)")
        run = await store.load(run.id) or run
        if not cancelled:
            raise JsonRpcError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{run.status}'")
        return cast(Task, task_view(run))


def _auth_error(exc: AuthFailure) -> AuthError:
    challenge = exc.challenge
    if challenge is None:
        return AuthError(exc.status, exc.message)
    return AuthError(
        exc.status,
        exc.message,
        resource_metadata=challenge.resource_metadata,
        scope=challenge.scope,
        error=challenge.error,
        error_description=challenge.error_description,
    )


def _ms_since(clock: float) -> float:
    return round((time.perf_counter() - clock) * 1000, 3)
