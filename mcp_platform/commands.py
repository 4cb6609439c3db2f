"""Management commands whose changes the audit log attributes to "manage.py <name>"."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from mcp_platform.actors import Actor, acting_as


class AuditedCommand(BaseCommand):
    def execute(self, *args: Any, **options: Any) -> Any:
        name = type(self).__module__.rsplit(".", 1)[-1]
        with acting_as(Actor(source="command", label=f"manage.py {name}")):
            return super().execute(*args, **options)
