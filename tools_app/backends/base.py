from __future__ import annotations


class BackendConfigError(ValueError):
    """A backend configuration cannot work; the message is shown to the admin."""


class BackendError(Exception):
    """A backend failed to produce a result; ``retryable`` says whether a retry could help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
