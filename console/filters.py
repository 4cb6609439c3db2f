"""The filters of the console's lists (also used by their exports and charts).

Each form reads the query string, offering the tenants the view loaded for the signed-in
user's scope; ``apply`` narrows a queryset that the scope already limited. A tenant or
key outside the scope raises 404 (``access_*``), so a filter cannot be used to learn that
another tenant's rows exist.

Search (``q``) is a case-insensitive substring match. On PostgreSQL, trigram GIN indexes
on ``UPPER(tool_name)`` and ``UPPER(error_message)`` (audit migrations 0002 and 0011) serve
exactly the ``UPPER(col) LIKE UPPER('%…%')`` that ``icontains`` compiles to; the error
message's index holds only rows that have one, so the search says ``error_message <> ''``
for the planner to use it. SQLite scans.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.http import urlencode

from audit.models import CONFIRMATION_REFUSALS, AuditEvent, ConfirmationOutcome, Invocation
from audit.signals import TRACKED
from console.access import access_key, access_tenant
from mcp_platform.mcp.versions import MODERN, SUPPORTED
from tenants.models import Tenant
from tenants.scope import TenantScope

RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
RANGE_CHOICES = [("", "Any time"), ("1h", "Last hour"), ("24h", "Last 24 hours"), ("7d", "Last 7 days"),
                 ("30d", "Last 30 days")]  # fmt: skip
NO_KEY = "none"
# The confirmation filter's choice for every answer that kept a call from running.
NOT_CONFIRMED = "refusals"


class _TimeFilterForm(forms.Form):
    tenant = forms.CharField(required=False, max_length=64)
    range = forms.ChoiceField(required=False, choices=RANGE_CHOICES)
    since = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    q = forms.CharField(required=False, max_length=200, strip=True, label="Search")

    time_field = "started_at"

    def __init__(self, data: Any, scope: TenantScope, tenants: Sequence[Tenant]) -> None:
        super().__init__(data)
        self.scope = scope
        everything = "All tenants" if scope.platform or len(tenants) != 1 else tenants[0].slug
        choices = [("", everything)] + [(tenant.slug, tenant.slug) for tenant in tenants]
        self.fields["tenant"].widget = forms.Select(choices=choices if len(choices) > 2 else choices[:1])

    def clean_tenant(self) -> Any:
        slug = self.cleaned_data.get("tenant") or ""
        return access_tenant(self.scope, slug) if slug else None

    def window(self) -> tuple[datetime | None, datetime | None]:
        data = self.cleaned_data
        since, until = data.get("since"), data.get("until")
        if data.get("range"):
            since = timezone.now() - RANGES[data["range"]]
        return since, until

    def apply_common(self, rows: QuerySet[Any]) -> QuerySet[Any]:
        data = self.cleaned_data
        if data.get("tenant") is not None:
            rows = rows.filter(tenant_id=data["tenant"].pk)
        since, until = self.window()
        if since is not None:
            rows = rows.filter(**{f"{self.time_field}__gte": since})
        if until is not None:
            rows = rows.filter(**{f"{self.time_field}__lt": until})
        return rows

    def querystring(self, **changes: Any) -> str:
        """The filters as they were given (without paging), with ``changes`` applied."""
        params = {name: value for name, value in self.data.items() if name in self.fields and value}
        params.update({name: value for name, value in changes.items() if value is not None})
        return urlencode({name: value for name, value in params.items() if value != ""})


class InvocationFilterForm(_TimeFilterForm):
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *Invocation.Kind.choices])
    tool = forms.CharField(required=False, max_length=1024, strip=True, label="Tool, prompt or URI")
    key = forms.CharField(required=False, max_length=20)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *Invocation.Outcome.choices])
    confirmation = forms.ChoiceField(
        required=False,
        choices=[("", "Any confirmation"), *ConfirmationOutcome.choices, (NOT_CONFIRMED, "Any refusal")],
    )
    revision = forms.ChoiceField(
        required=False,
        label="Protocol revision",
        choices=[("", "Any revision"), *((version, version) for version in (*MODERN, *SUPPORTED))],
    )
    session = forms.CharField(required=False, max_length=128, strip=True)
    run = forms.CharField(required=False, max_length=32, strip=True)
    oauth_subject = forms.CharField(required=False, max_length=255, strip=True, label="OAuth subject")
    oauth_client = forms.CharField(required=False, max_length=255, strip=True, label="OAuth client")

    field_order = [
        "tenant",
        "kind",
        "tool",
        "key",
        "oauth_subject",
        "oauth_client",
        "outcome",
        "confirmation",
        "revision",
        "range",
        "since",
        "until",
        "q",
    ]

    def __init__(self, data: Any, scope: TenantScope, tenants: Sequence[Tenant]) -> None:
        super().__init__(data, scope, tenants)
        self.fields["q"].widget.attrs["placeholder"] = "tool, prompt, URI or error text"
        self.fields["tool"].widget.attrs["list"] = "tool-names"

    def clean_key(self) -> Any:
        raw = (self.cleaned_data.get("key") or "").strip()
        if not raw or raw == NO_KEY:
            return raw
        if not raw.isdigit():
            raise forms.ValidationError("A key is chosen by its id.")
        return access_key(self.scope, int(raw))

    def apply(self, rows: QuerySet[Invocation]) -> QuerySet[Invocation]:
        rows = self.apply_common(rows)
        data = self.cleaned_data
        if data.get("kind"):
            rows = rows.filter(kind=data["kind"])
        if data.get("tool"):
            rows = rows.filter(tool_name=data["tool"])
        key = data.get("key")
        if key == NO_KEY:
            rows = rows.filter(key_id__isnull=True)
        elif key:
            rows = rows.filter(key_id=key.pk)
        if data.get("outcome"):
            rows = rows.filter(outcome=data["outcome"])
        if data.get("confirmation") == NOT_CONFIRMED:
            rows = rows.filter(confirmation__in=CONFIRMATION_REFUSALS)
        elif data.get("confirmation"):
            rows = rows.filter(confirmation=data["confirmation"])
        if data.get("revision"):
            rows = rows.filter(protocol_version=data["revision"])
        if data.get("session"):
            rows = rows.filter(session_id=data["session"])
        if data.get("run"):
            rows = rows.filter(run_id=data["run"])
        if data.get("oauth_subject"):
            rows = rows.filter(oauth_subject=data["oauth_subject"])
        if data.get("oauth_client"):
            rows = rows.filter(oauth_client=data["oauth_client"])
        if data.get("q"):
            has_error = ~Q(error_message="")  # the trigram index's own condition (see above)
            rows = rows.filter(Q(tool_name__icontains=data["q"]) | (has_error & Q(error_message__icontains=data["q"])))
        return rows


class ChangeFilterForm(_TimeFilterForm):
    time_field = "created_at"

    object_type = forms.ChoiceField(required=False, choices=[("", "Any object"), *((t, t) for t in TRACKED)])
    action = forms.ChoiceField(required=False, choices=[("", "Any action"), *AuditEvent.Action.choices])
    source = forms.ChoiceField(required=False, choices=[("", "Any source"), *AuditEvent.Source.choices])
    actor = forms.CharField(required=False, max_length=200, strip=True)
    oauth_subject = forms.CharField(required=False, max_length=255, strip=True, label="OAuth subject")
    oauth_client = forms.CharField(required=False, max_length=255, strip=True, label="OAuth client")

    field_order = [
        "tenant", "object_type", "action", "source", "actor", "oauth_subject", "oauth_client", "range", "since",
        "until", "q",
    ]  # fmt: skip

    def __init__(self, data: Any, scope: TenantScope, tenants: Sequence[Tenant]) -> None:
        super().__init__(data, scope, tenants)
        self.fields["q"].widget.attrs["placeholder"] = "object name or id"

    def apply(self, rows: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        rows = self.apply_common(rows)
        data = self.cleaned_data
        for name, lookup in (
            ("object_type", "object_type"),
            ("action", "action"),
            ("source", "source"),
            ("oauth_subject", "oauth_subject"),
            ("oauth_client", "oauth_client"),
        ):
            if data.get(name):
                rows = rows.filter(**{lookup: data[name]})
        if data.get("actor"):
            rows = rows.filter(actor_label__icontains=data["actor"])
        if data.get("q"):
            rows = rows.filter(Q(object_repr__icontains=data["q"]) | Q(object_id=data["q"]))
        return rows
