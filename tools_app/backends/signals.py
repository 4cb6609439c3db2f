"""Fan-out only: a change to a secret or an upstream server invalidates the backend caches
of every process (``tools_app.backends.cache``), after commit."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from tools_app.backends.cache import backend_state_changed
from tools_app.backends.models import BackendSecret
from tools_app.backends.upstream.models import UpstreamServer


@receiver([post_save, post_delete], sender=BackendSecret)
@receiver([post_save, post_delete], sender=UpstreamServer)
def _backend_state_changed(**_: Any) -> None:
    backend_state_changed()
