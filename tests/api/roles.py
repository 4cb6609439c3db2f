"""The tenant roles the API tests' members hold (``members``, ``as_role`` in conftest.py), highest first."""

ROLES = ("owner", "admin", "operator", "viewer")
