"""The console and the REST API on confirmations: the invocation log filtered by what became
of them, the detail, the declines chart, and the pending approvals page (scoped to the
tenants one operates; nobody decides their own call; a decided call stays decided)."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any
from urllib.parse import unquote_plus

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import ConfirmationOutcome
from tenants.services import api_key_create
from tools_app.runs.approvals import approvals_purge_expired
from tools_app.runs.models import Approval


@pytest.fixture
def confirmed_rows(acme, globex, make_invocation) -> dict[str, Any]:
    now = time.time()
    user = {"confirmed_by": "the client's user", "confirmed_at": now}
    return {
        "granted": make_invocation(acme, "wipe", confirmation=ConfirmationOutcome.GRANTED, **user),
        "declined": make_invocation(acme, "wipe", "not_confirmed", confirmation=ConfirmationOutcome.DECLINED, **user),
        "refused": make_invocation(acme, "pay", "not_confirmed", confirmation=ConfirmationOutcome.REFUSED),
        "plain": make_invocation(acme, "echo"),
        "globex": make_invocation(globex, "wipe", "not_confirmed", confirmation=ConfirmationOutcome.DECLINED, **user),
    }


def _listed(client: Any, **query: str) -> set[int]:
    body = client.get("/console/invocations/", query).content.decode()
    return {int(pk) for pk in re.findall(r'href="/console/invocations/(\d+)/"', body)}


def test_the_log_filters_by_confirmation(operator_client, confirmed_rows) -> None:
    rows = confirmed_rows
    assert _listed(operator_client, confirmation="declined") == {rows["declined"].pk}
    assert _listed(operator_client, confirmation="refusals") == {rows["declined"].pk, rows["refused"].pk}
    assert _listed(operator_client, confirmation="granted") == {rows["granted"].pk}
    detail = operator_client.get(f"/console/invocations/{rows['declined'].pk}/").content.decode()
    assert "Declined</a> by the client&#x27;s user at" in detail and "Not confirmed" in detail


def test_the_overview_charts_declines(operator_client, confirmed_rows) -> None:
    body = operator_client.get("/console/", {"window": "hour"}).content.decode()
    assert 'id="stat-declined">2<' in body  # acme's declined and refused, not globex's
    assert body.count('class="confirmation declined"') == 1 and body.count('class="confirmation granted"') == 1
    assert 'class="confirmation refused"' in body and "1 refused of 2" in body


def test_the_api_shows_and_filters_confirmations(acme, confirmed_rows, acme_operator) -> None:
    api = APIClient()
    api.force_authenticate(acme_operator)
    answer = api.get("/api/v1/invocations/", {"confirmation": "declined"}).json()
    (row,) = answer["results"]
    assert row["id"] == confirmed_rows["declined"].pk
    assert row["confirmation"] == "declined" and row["confirmed_by"] == "the client's user" and row["confirmed_at"]
    assert api.get("/api/v1/invocations/", {"confirmation": "maybe"}).status_code == 400


def _approval(tenant: Any, **fields: Any) -> Approval:
    values = {
        "tool_name": "pay",
        "tool_title": "Pay an invoice",
        "arguments": {"amount": 12, "pin": "[redacted]"},
        "requested_by": "agent (tbk_…)",
        "expires_at": timezone.now() + timedelta(minutes=5),
        **fields,
    }
    return Approval.objects.create(tenant=tenant, **values)


def test_the_approvals_page_lists_only_operated_tenants(operator_client, acme, globex) -> None:
    mine, theirs = _approval(acme), _approval(globex, tool_name="globex_pay", tool_title="")
    page = operator_client.get("/console/approvals/").content.decode()
    assert f'data-approval="{mine.pk}"' in page and "Pay an invoice" in page and "[redacted]" in page
    assert "globex_pay" not in page
    rows = operator_client.get("/console/approvals/pending/").content.decode()
    assert f'data-approval="{mine.pk}"' in rows and f'data-approval="{theirs.pk}"' not in rows
    # Another tenant's approval cannot be decided (it looks missing).
    refused = operator_client.post(f"/console/approvals/{theirs.pk}/decision/", {"decision": "approve"})
    assert refused.status_code == 302 and "No such approval" in unquote_plus(refused["Location"])
    theirs.refresh_from_db()
    assert theirs.status == Approval.Status.PENDING


def test_an_operator_decides_once(operator_client, acme, acme_operator) -> None:
    approval = _approval(acme)
    decided = operator_client.post(f"/console/approvals/{approval.pk}/decision/", {"decision": "deny"})
    assert decided.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == (Approval.Status.DENIED, acme_operator)
    again = operator_client.post(f"/console/approvals/{approval.pk}/decision/", {"decision": "approve"})
    assert "decided already" in unquote_plus(again["Location"])
    approval.refresh_from_db()
    assert approval.status == Approval.Status.DENIED
    assert operator_client.post(f"/console/approvals/{approval.pk}/decision/", {"decision": "x"}).status_code == 400
    assert operator_client.get(f"/console/approvals/{approval.pk}/decision/").status_code == 405


def test_nobody_approves_their_own_call(operator_client, acme, acme_operator) -> None:
    key, _ = api_key_create(tenant=acme, name="my agent", created_by=acme_operator)
    approval = _approval(acme, requester_user=acme_operator)
    answer = operator_client.post(f"/console/approvals/{approval.pk}/decision/", {"decision": "approve"})
    assert "your own call" in unquote_plus(answer["Location"])
    approval.refresh_from_db()
    assert approval.status == Approval.Status.PENDING and key.created_by == acme_operator


def test_viewers_have_no_approvals(make_user, acme, client) -> None:
    viewer = make_user("vera", acme, role="viewer")
    client.force_login(viewer)
    _approval(acme)
    assert client.get("/console/approvals/").status_code == 403


def test_approvals_long_over_are_purged(acme) -> None:
    old = _approval(acme, expires_at=timezone.now() - timedelta(days=2))
    recent = _approval(acme, expires_at=timezone.now() - timedelta(hours=1), status=Approval.Status.EXPIRED)
    assert approvals_purge_expired() == 1
    assert list(Approval.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not Approval.objects.filter(pk=old.pk).exists()
