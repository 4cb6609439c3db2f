"""Property-based run of the REST API against its own OpenAPI schema (schemathesis).

Every operation gets requests generated from the schema — valid ones and, with the
negative phase, ones that break it — and every answer must be no 5xx, a documented status
code and content type, and a body that matches the documented schema. Path ids are drawn
partly from real objects so the runs reach the code behind the 404s.

Requests are made as one of three personas (a platform admin, acme's admin, acme's
viewer), so the role checks and the tenant scoping are fuzzed too.

Bounded for CI: ``TOOLBAY_FUZZ_EXAMPLES`` examples per operation (default 15, positive
and negative), derandomized so a CI run is reproducible; about 40 s for the whole API.
For a deeper search add schemathesis's coverage phase (boundary values of every field, and
unexpected methods), e.g. ``TOOLBAY_FUZZ_EXAMPLES=60 TOOLBAY_FUZZ_COVERAGE=1 pytest
tests/api/test_schema_fuzz.py`` (about 7,000 requests, four minutes).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.services import access_token_create
from audit.models import AuditEvent, Invocation
from tenants.services import api_key_create, membership_set, tenant_create
from tests.makers import rule_grant, tool_make
from tools_app.catalog.models import AccessRule, Tool

EXAMPLES = int(os.environ.get("TOOLBAY_FUZZ_EXAMPLES", "15"))
COVERAGE = os.environ.get("TOOLBAY_FUZZ_COVERAGE", "") not in ("", "0")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


class InTestWSGIHandler(WSGIHandler):
    """Django's WSGI app, minus closing the database connection around each request (the
    test's transaction lives on it), as Django's own test client does."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        for signal in (request_started, request_finished):
            signal.disconnect(close_old_connections)
        try:
            response = super().__call__(environ, start_response)
            body = b"".join(response)
            response.close()  # sends request_finished, while it is disconnected
            return [body]
        finally:
            for signal in (request_started, request_finished):
                signal.connect(close_old_connections)


CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": COVERAGE}}})
schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True), config=CONFIG)
schema.app = InTestWSGIHandler()

# Ids of real objects for the path parameters; filled per test by the `world` fixture.
KNOWN: dict[str, list[Any]] = {"id": [], "slug": []}


def _with(path_parameters: dict[str, Any], name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(KNOWN[name]).map(lambda value: {**path_parameters, name: value})


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """Half the time (or so) a path parameter names a real object instead of a random one."""
    if not path_parameters:
        return st.just(path_parameters)
    choices = [st.just(path_parameters)]
    choices += [_with(path_parameters, name) for name in path_parameters if KNOWN.get(name)]
    return st.one_of(*choices)


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """A small installation: two tenants, members, keys, platform and private tools, rules,
    invocations and the audit events all that made.

    Made once for the module, inside a transaction rolled back at its end: each test's own
    transaction (pytest-django's) is a savepoint within it, so every test still starts from
    this same world without building it once per operation (97 times)."""
    with django_db_blocker.unblock(), transaction.atomic():
        user_model = get_user_model()
        acme = tenant_create(slug="acme", name="Acme Corp")
        globex = tenant_create(slug="globex", name="Globex Inc")
        superuser = user_model.objects.create_superuser("root", password="pw")
        viewer = user_model.objects.create_user("fuzz-viewer")
        membership_set(tenant=acme, user=viewer, role="viewer")
        key, _ = api_key_create(tenant=acme, name="bot")
        api_key_create(tenant=globex, name="other")
        echo = tool_make("echo", tenant=acme)
        tool_make(
            "add",
            handler="demo.add",
            input_schema={
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            output_schema={"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
        )
        rule_grant(acme, echo, owner=acme, keys=[key])
        rule_grant(None, "add")
        admin = user_model.objects.create_user("fuzz-admin")
        membership_set(tenant=acme, user=admin, role="admin")
        tokens = {
            persona: access_token_create(user=user, name="fuzz")
            for persona, user in (("platform", superuser), ("admin", admin), ("viewer", viewer))
        }
        now = timezone.now()
        for tenant, outcome in ((acme, "completed"), (acme, "error"), (globex, "denied")):
            Invocation.objects.create(
                tenant=tenant,
                tool_name="echo",
                outcome=outcome,
                arguments={"text": "x"},
                started_at=now,
                finished_at=now,
            )
        ids = {
            *Tool.objects.values_list("pk", flat=True),
            *Invocation.objects.values_list("pk", flat=True),
            *AuditEvent.objects.values_list("pk", flat=True),
            *AccessRule.objects.values_list("pk", flat=True),
            key.pk,
            *(token.pk for token, _ in tokens.values()),
            viewer.memberships.get().pk,
        }
        KNOWN["id"] = sorted(ids)
        KNOWN["slug"] = ["acme", "globex"]
        try:
            yield {persona: {"Authorization": f"Bearer {raw}"} for persona, (_, raw) in tokens.items()}
        finally:
            KNOWN["id"], KNOWN["slug"] = [], []
            transaction.set_rollback(True)


@pytest.mark.django_db
@schema.parametrize()
@schema.given(persona=st.sampled_from(["platform", "admin", "viewer"]))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_as_documented(case: schemathesis.Case, persona: str, world: dict[str, Any]) -> None:
    # Each example starts from the same world: whatever it wrote is rolled back.
    with transaction.atomic():
        try:
            case.call_and_validate(headers=world[persona], checks=CHECKS)
        finally:
            transaction.set_rollback(True)
