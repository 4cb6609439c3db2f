"""Detached work (``mcp_platform.mcp.detached``): kept alive until it ends, its failure logged once."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from mcp_platform.mcp import detached


async def _fails() -> None:
    raise ConnectionError("cannot reach Redis")


def test_a_failed_detached_task_is_logged_once_as_a_warning_not_as_never_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        detached.detach(_fails())
        while detached._detached:
            await asyncio.sleep(0)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
        gc.collect()  # asyncio reports an unretrieved exception when the task is collected
    failures = [record for record in caplog.records if "cannot reach Redis" in record.getMessage()]
    assert len(failures) == 1
    assert failures[0].levelno == logging.WARNING and failures[0].name == "mcp_platform.mcp.detached"
    assert not [record for record in caplog.records if "never retrieved" in record.getMessage()]
