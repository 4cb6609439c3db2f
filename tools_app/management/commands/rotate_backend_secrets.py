"""Re-encrypt every backend secret with the first key of TOOLBAY_SECRET_KEYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tools_app.backends.vault import secrets_rotate


class Command(BaseCommand):
    help = (
        "Re-encrypt every backend secret with the first key of TOOLBAY_SECRET_KEYS. Key rotation: put the "
        "new key first (keep the old ones after it), restart, run this, then remove the old keys."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        rotated, unreadable = secrets_rotate()
        self.stdout.write(f"re-encrypted {rotated} secret(s) with the first key of TOOLBAY_SECRET_KEYS")
        if unreadable:
            raise CommandError(
                f"{len(unreadable)} secret(s) cannot be decrypted with any configured key and were left as they "
                f"are: {', '.join(unreadable)}. Add the key they were encrypted with, or set them again."
            )
