"""Keep tools imported from upstream MCP servers in step with them (see upstream_listener)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tools_app.backends.upstream.listener import listen_upstreams


class Command(BaseCommand):
    help = (
        "Listen to every enabled upstream MCP server and re-import its tools when it sends "
        "notifications/tools/list_changed (and every TOOLBAY_UPSTREAM_REFRESH_SECONDS). Runs until "
        "SIGINT/SIGTERM; several may run, one watches each upstream."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--sync-seconds",
            type=float,
            default=10.0,
            help="How often the list of upstream servers is read again (default 10).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            self.stdout.write("listening to upstream MCP servers", ending="\n")
            self.stdout.flush()
            await listen_upstreams(stop, sync_seconds=options["sync_seconds"])

        asyncio.run(main())
