"""The numbers behind the console's charts, for the last hour or day of a scoped queryset.

Four aggregate queries, each bounded by the time window (the ``tenant, -started_at``
index, or ``started_at`` for all tenants): calls per minute by outcome, latency
percentiles per tool, the most frequent errors, and confirmations per tool by what became
of them (the declines chart). Percentiles are computed by
PostgreSQL (``percentile_cont``); on SQLite, the embedded laptop database, in Python.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import Aggregate, Count, FloatField, Q, QuerySet
from django.db.models.functions import Left, TruncMinute
from django.utils import timezone

from audit.models import CONFIRMATION_REFUSALS, ConfirmationOutcome, Invocation, Outcome

WINDOWS = {"hour": (timedelta(hours=1), 1), "day": (timedelta(days=1), 15)}  # span, minutes per bar
# A day of a busy platform is 100k+ rows to aggregate (0.5-0.8 s on 1M rows, see the
# README), so an overview is reused for a while; the hour view stays nearly live.
CACHE_SECONDS = {"hour": 10, "day": 60}
TOP_TOOLS = 10
TOP_ERRORS = 10
ERROR_PREFIX = 160  # errors that differ only after this many characters count as one


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expr)``."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction))


@dataclass
class Bucket:
    start: datetime
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class ToolLatency:
    tool: str
    calls: int
    p50_ms: float
    p95_ms: float


@dataclass
class TopError:
    tool: str
    outcome: str
    message: str
    count: int


@dataclass
class ToolConfirmations:
    """How the confirmations of one tool's calls ended (granted, declined, …) in the window."""

    tool: str
    counts: dict[str, int]

    @property
    def refused(self) -> int:
        return sum(n for outcome, n in self.counts.items() if outcome in CONFIRMATION_REFUSALS)


@dataclass
class Overview:
    window: str
    since: datetime
    minutes_per_bucket: int
    buckets: list[Bucket]
    latency: list[ToolLatency]
    errors: list[TopError]
    confirmations: list[ToolConfirmations] = field(default_factory=list)

    @property
    def declined(self) -> int:
        return sum(tool.refused for tool in self.confirmations)

    @property
    def total(self) -> int:
        return sum(bucket.total for bucket in self.buckets)

    @property
    def failed(self) -> int:
        return sum(n for bucket in self.buckets for outcome, n in bucket.counts.items() if outcome != Outcome.COMPLETED)

    @property
    def outcomes(self) -> list[str]:
        present = {outcome for bucket in self.buckets for outcome in bucket.counts}
        return [value for value in Invocation.Outcome.values if value in present]


def _floor(moment: datetime, minutes: int) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    return moment - timedelta(minutes=moment.minute % minutes) if minutes > 1 else moment


def calls_per_bucket(rows: QuerySet[Invocation], since: datetime, now: datetime, minutes: int) -> list[Bucket]:
    per_minute = (
        rows.filter(started_at__gte=since)
        .annotate(minute=TruncMinute("started_at"))
        .values_list("minute", "outcome")
        .annotate(n=Count("*"))
        .order_by()
    )
    first = _floor(since, minutes)
    buckets: list[Bucket] = []
    moment = first
    while moment <= now:
        buckets.append(Bucket(moment))
        moment += timedelta(minutes=minutes)
    for minute, outcome, n in per_minute:
        index = int((minute - first).total_seconds() // (60 * minutes))
        if 0 <= index < len(buckets):
            counts = buckets[index].counts
            counts[outcome] = counts.get(outcome, 0) + n
    return buckets


def latency_per_tool(rows: QuerySet[Invocation], since: datetime) -> list[ToolLatency]:
    timed = rows.filter(started_at__gte=since, duration_ms__isnull=False).exclude(tool_name="")
    if connection.vendor == "postgresql":
        ranked = (
            timed.values("tool_name")
            .annotate(n=Count("*"), p50=PercentileCont("duration_ms", 0.5), p95=PercentileCont("duration_ms", 0.95))
            .order_by("-n", "tool_name")[:TOP_TOOLS]
        )
        return [ToolLatency(r["tool_name"], r["n"], r["p50"] or 0.0, r["p95"] or 0.0) for r in ranked]
    durations: dict[str, list[float]] = defaultdict(list)
    for tool, duration in timed.values_list("tool_name", "duration_ms").iterator():
        durations[tool].append(duration or 0.0)  # the filter above leaves no NULL
    result = []
    for tool, values in durations.items():
        values.sort()
        if len(values) == 1:
            p50 = p95 = values[0]
        else:
            cuts = statistics.quantiles(values, n=100, method="inclusive")
            p50, p95 = cuts[49], cuts[94]
        result.append(ToolLatency(tool, len(values), p50, p95))
    result.sort(key=lambda item: (-item.calls, item.tool))
    return result[:TOP_TOOLS]


def top_errors(rows: QuerySet[Invocation], since: datetime) -> list[TopError]:
    grouped = (
        rows.filter(~Q(outcome=Invocation.Outcome.COMPLETED), started_at__gte=since)
        .annotate(message=Left("error_message", ERROR_PREFIX))
        .values_list("tool_name", "outcome", "message")
        .annotate(n=Count("*"))
        .order_by("-n", "tool_name")[:TOP_ERRORS]
    )
    return [TopError(tool, outcome, message, n) for tool, outcome, message, n in grouped]


def confirmations_per_tool(rows: QuerySet[Invocation], since: datetime) -> list[ToolConfirmations]:
    """The tools whose calls needed a confirmation, most refused first."""
    answered = [outcome for outcome in ConfirmationOutcome.values if outcome != ConfirmationOutcome.ASKED]
    grouped = (
        rows.filter(started_at__gte=since, confirmation__in=answered)
        .values_list("tool_name", "confirmation")
        .annotate(n=Count("*"))
        .order_by()
    )
    per_tool: dict[str, dict[str, int]] = defaultdict(dict)
    for tool, confirmation, n in grouped:
        per_tool[tool][confirmation] = n
    tools = [ToolConfirmations(tool, counts) for tool, counts in per_tool.items()]
    tools.sort(key=lambda item: (-item.refused, -sum(item.counts.values()), item.tool))
    return tools[:TOP_TOOLS]


def overview_cached(rows: QuerySet[Invocation], window: str, *, cache_key: str) -> Overview:
    """``overview``, reused for CACHE_SECONDS[window] under ``cache_key`` (which must name
    everything that narrowed ``rows``: the scope and the filters)."""
    key = "console:overview:" + hashlib.sha256(f"{window}|{cache_key}".encode()).hexdigest()
    data = cache.get(key)
    if not isinstance(data, Overview):
        data = overview(rows, window)
        cache.set(key, data, CACHE_SECONDS[window])
    return data


def overview(rows: QuerySet[Invocation], window: str) -> Overview:
    span, minutes = WINDOWS[window]
    now = timezone.now()
    since = now - span
    return Overview(
        window=window,
        since=since,
        minutes_per_bucket=minutes,
        buckets=calls_per_bucket(rows, since, now, minutes),
        latency=latency_per_tool(rows, since),
        errors=top_errors(rows, since),
        confirmations=confirmations_per_tool(rows, since),
    )
