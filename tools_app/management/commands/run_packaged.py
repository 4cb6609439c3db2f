"""Run packaged MCP servers' instances (see tools_app.backends.packaged.runner)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from tools_app.backends.packaged.runner import Runner


class Command(BaseCommand):
    help = (
        "Start, relay to and supervise the instances of packaged (npm/PyPI/command) MCP servers: one per "
        "server and tenant, started on first use, stopped when idle. Runs until SIGINT/SIGTERM; several "
        "may run (one per machine is usual)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.TOOLBAY_RUNNER_HOST, help="Bind address (TOOLBAY_RUNNER_HOST).")
        parser.add_argument(
            "--port", type=int, default=settings.TOOLBAY_RUNNER_PORT, help="Port (TOOLBAY_RUNNER_PORT; 0: any free)."
        )
        parser.add_argument(
            "--advertise",
            default=settings.TOOLBAY_RUNNER_ADVERTISE,
            help="Host other processes reach this runner at (TOOLBAY_RUNNER_ADVERTISE; default: the bind address).",
        )

        parser.add_argument(
            "--package-cache", default="", help="Where installs are cached (default TOOLBAY_PACKAGE_CACHE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["package_cache"]:
            settings.TOOLBAY_PACKAGE_CACHE = options["package_cache"]
        logging.getLogger("tools_app.backends.packaged").setLevel(logging.INFO)
        logging.getLogger("httpx").setLevel(logging.WARNING)

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            runner = Runner(host=options["host"], port=options["port"], advertise=options["advertise"])
            task = asyncio.ensure_future(runner.run(stop))
            while not runner.base_url and not task.done():
                await asyncio.sleep(0.05)
            if runner.base_url:
                self.stdout.write(f"running packaged MCP servers at {runner.base_url} (runner {runner.id})")
                self.stdout.flush()
            await task

        asyncio.run(main())
