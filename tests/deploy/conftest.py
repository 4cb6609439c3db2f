"""Deployment checks: the Helm chart rendered with helm-python-sdk (Helm's Go SDK through a
shared library: no helm binary, no cluster), the image, compose and nginx files checked by
their own validators. None of them reads the test database or Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _clean_test_redis() -> Iterator[None]:
    """These checks touch no Redis: the suite's flush of its db is not needed (nor Redis)."""
    yield
