"""The invocation log's partial indexes (audit migration 0011) still serve the console.

Most audited calls leave the OAuth subject and client and the error message empty, so their
indexes hold only rows that have one, and each audited call writes fewer index entries. A
filter the planner cannot prove to imply an index's condition would quietly scan the whole
log instead: these tests run the console's own queries through EXPLAIN, over a log of
thousands of rows, and read which indexes the plans use.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import Invocation

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="partial and trigram indexes of PostgreSQL"),
]


FILLER = 5000  # API-key calls that succeeded, as most are: enough for the planner to choose


@pytest.fixture
def rows(acme, make_invocation) -> dict[str, Invocation]:
    made = {
        "oauth": make_invocation(acme, "echo", oauth_subject="ada", oauth_client="ide"),
        "failed": make_invocation(acme, "fetch_page", outcome="error", error_message="upstream timed out"),
        "key": make_invocation(acme, "echo", ago=timedelta(minutes=2)),
    }
    columns = [f.column for f in Invocation._meta.concrete_fields if f.column not in ("id", "call_id")]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO audit_invocation (call_id, {', '.join(columns)}) "
            f"SELECT 'filler-' || n, {', '.join(columns)} FROM audit_invocation, generate_series(1, %s) AS n "
            "WHERE id = %s",
            [FILLER, made["key"].pk],
        )
        cursor.execute("ANALYZE audit_invocation")
        for gin in ("invocation_tool_trgm", "invocation_error_text_trgm"):  # as autovacuum would
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [gin])
    return made


LIST_QUERY = 'SELECT "audit_invocation"."id", "audit_invocation"."tenant_id",'


def _plan_of_the_list(client: Any, query: str) -> tuple[list[int], str]:
    """The invocation ids the console lists for ``query``, and the plan of its list query."""
    with CaptureQueriesContext(connection) as captured:
        page = client.get(f"/console/invocations/?{query}")
    assert page.status_code == 200
    ids = [int(pk) for pk in re.findall(r'href="/console/invocations/(\d+)/"', page.content.decode())]
    listing = [q["sql"] for q in captured.captured_queries if q["sql"].startswith(LIST_QUERY)]
    assert len(listing) == 1, captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + listing[0])
        plan = "\n".join(line for (line,) in cursor.fetchall())
    return ids, plan


def test_the_search_uses_the_error_messages_partial_trigram_index(operator_client, rows) -> None:
    ids, plan = _plan_of_the_list(operator_client, "q=timed")
    assert ids == [rows["failed"].pk]
    assert "invocation_error_text_trgm" in plan and "invocation_tool_trgm" in plan, plan
    ids, _ = _plan_of_the_list(operator_client, "q=fetch")  # the tool's name still matches
    assert ids == [rows["failed"].pk]


@pytest.mark.parametrize(
    ("field", "value", "index"),
    [
        ("oauth_subject", "ada", "invocation_oauth_subject"),
        ("oauth_client", "ide", "invocation_oauth_client"),
    ],
)
def test_the_oauth_filters_use_their_partial_indexes(operator_client, rows, field, value, index) -> None:
    ids, plan = _plan_of_the_list(operator_client, f"{field}={value}")
    assert ids == [rows["oauth"].pk]
    assert index in plan, plan


def test_the_log_carries_no_index_a_wider_one_serves() -> None:
    """Each index is one more write per audited call: the table has exactly these, and the
    ones on mostly empty columns are partial."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'audit_invocation'")
        indexes = dict(cursor.fetchall())
    assert set(indexes) == {
        "audit_invocation_pkey",
        "audit_invocation_call_id_key",  # what the writer's ON CONFLICT (call_id) needs
        "invocation_tenant_recent",
        "invocation_tenant_tool",
        "invocation_tenant_outcome",
        "invocation_tenant_key",
        "invocation_oauth_subject",
        "invocation_oauth_client",
        "invocation_tenant_confirm",
        "invocation_started",
        "invocation_tool_trgm",
        "invocation_error_text_trgm",
    }
    for name, column in [
        ("invocation_oauth_subject", "oauth_subject"),
        ("invocation_oauth_client", "oauth_client"),
        ("invocation_error_text_trgm", "error_message"),
    ]:
        assert f"WHERE (NOT (({column})" in indexes[name] or f"WHERE (NOT ({column}" in indexes[name], indexes[name]
