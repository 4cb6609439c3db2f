"""Running one tool call: argument validation, the backend, the timeout, the result checks.

Every failure a model could act on comes back as a result with ``isError: true`` and a
message; nothing here ever lets a stack trace reach the client.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from mcp_platform.mcp.calls import CallLink
from tools_app.backends import BackendError, backend_for
from tools_app.context import ToolContext
from tools_app.results import ToolError, error_result, normalize
from tools_app.schemas import describe_error, first_error
from tools_app.spec import ToolSpec

log = logging.getLogger(__name__)


async def tool_call(tool: ToolSpec, arguments: dict[str, Any], link: CallLink) -> dict[str, Any]:
    problem = first_error(tool.input_validator, arguments)
    if problem is not None:
        return error_result(describe_error(problem, subject="arguments") + f". Check the inputSchema of '{tool.name}'.")
    if tool.execution_mode != "inline":
        return error_result(
            f"Tool '{tool.name}' is configured for background execution, which is not enabled on this server."
        )
    ctx = ToolContext(link, tool_name=tool.name)
    try:
        async with asyncio.timeout(tool.timeout_seconds):
            output = await backend_for(tool.backend_kind).call(tool, arguments, ctx)
        result = normalize(output, has_output_schema=tool.output_schema is not None)
    except TimeoutError:
        return error_result(f"Tool '{tool.name}' timed out after {tool.timeout_seconds:g} seconds.")
    except ToolError as exc:
        return error_result(str(exc))
    except BackendError as exc:
        return error_result(f"Tool '{tool.name}' failed: {exc}")
    except Exception:
        reference = secrets.token_hex(4)
        log.exception("tool %s failed (reference %s)", tool.name, reference)
        return error_result(f"Tool '{tool.name}' failed with an internal error (reference {reference}).")
    return _check_output(tool, result)


def _check_output(tool: ToolSpec, result: dict[str, Any]) -> dict[str, Any]:
    validator = tool.output_validator
    if validator is None or result.get("isError"):
        return result
    if "structuredContent" not in result:
        return error_result(f"Tool '{tool.name}' returned no structuredContent although it declares an outputSchema.")
    problem = first_error(validator, result["structuredContent"])
    if problem is not None:
        log.warning("tool %s broke its outputSchema: %s", tool.name, problem.message)
        return error_result(
            f"Tool '{tool.name}' produced output that does not match its outputSchema: "
            + describe_error(problem, subject="output")
        )
    return result
