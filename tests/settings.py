"""Test settings: the project's settings pointed at databases that belong to the tests.

Tests never touch a user's data: PostgreSQL gets its own database (pytest-django creates
``test_<name>``) and Redis its own db number, which the suite flushes. Override with
TOOLBAY_TEST_DATABASE_URL / TOOLBAY_TEST_REDIS_URL.
"""

import os

os.environ["DATABASE_URL"] = os.environ.get("TOOLBAY_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay")
os.environ["REDIS_URL"] = os.environ.get("TOOLBAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("CHANNEL_LAYER_PREFIX", "toolbay-test:asgi")
# The conformance fixtures (outside the product) are handlers many tests call too.
os.environ.setdefault("TOOLBAY_HANDLER_MODULES", "tests.mcp.handlers,conformance.handlers")

from mcp_platform.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
