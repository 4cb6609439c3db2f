"""Prometheus metrics of this process, served at ``/metrics`` (see ``mcp_platform.health``).

Every ASGI process keeps its own counters (no shared multiprocess directory), so each
process is a scrape target of its own: run one scrape job per process, or per container
with one process each, and sum in PromQL. Calls that run on Celery workers are recorded by
the worker (``audit.journal.Journal.append_now``) and so counted in the worker's memory, which no
endpoint serves; the Invocation table and the console have them all.

The call counters sit on the call path, so they are plain dict increments under one lock:
1.6 µs per call on the 2-core development machine (timeit), where prometheus_client's
labelled Counter plus Histogram took 8.2 µs. Tenant ids become slugs only when Prometheus
scrapes.

This module imports no Django and no app: ``mcp_platform.mcp`` (which stays free of both)
increments ``LIST_CHANGED_SENT`` from here, and the tenant slugs come from a lookup the
audit app registers (``register_call_collector``).
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Seconds. Inline tools answer in milliseconds; background calls take up to minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

LIST_CHANGED_SENT = Counter(
    "toolbay_list_changed_sent",
    "notifications/tools/list_changed written to sessions' standalone streams by this process.",
)
AUDIT_ROWS_DROPPED = Counter(
    "toolbay_audit_rows_dropped",
    "Invocation rows this process dropped because the audit journal was full (no audit writer running?).",
)
# Set when Prometheus scrapes (mcp_platform.health.metrics).
OPEN_STREAMS = Gauge("toolbay_open_streams", "Standalone GET streams (open MCP sessions listening) held here.")
QUEUE_LENGTH = Gauge("toolbay_celery_queue_length", "Messages waiting in a Celery queue.", ["queue"])
AUDIT_BACKLOG = Gauge(
    "toolbay_audit_backlog_rows", "Invocation rows in the audit journal not yet written to the database."
)
AUDIT_QUARANTINED = Gauge(
    "toolbay_audit_quarantined_rows",
    "Invocation rows the audit writers quarantined because the database refused them (all processes).",
)


class CallStats:
    """Counts of recorded tools/call by (tenant id, tool, outcome) and latency histograms
    by (tenant id, tool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[int, str, str], int] = defaultdict(int)
        # (tenant id, tool) -> [count per bucket (non-cumulative) ..., +Inf count], sum
        self._buckets: dict[tuple[int, str], list[int]] = {}
        self._sums: dict[tuple[int, str], float] = defaultdict(float)

    def observe(self, tenant_id: int, tool: str, outcome: str, duration_ms: float | None) -> None:
        with self._lock:
            self._calls[(tenant_id, tool, outcome)] += 1
            if duration_ms is not None:
                seconds = duration_ms / 1000
                key = (tenant_id, tool)
                buckets = self._buckets.get(key)
                if buckets is None:
                    buckets = self._buckets[key] = [0] * (len(LATENCY_BUCKETS) + 1)
                buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
                self._sums[key] += seconds

    def snapshot(self) -> tuple[dict[tuple[int, str, str], int], dict[tuple[int, str], tuple[list[int], float]]]:
        with self._lock:
            calls = dict(self._calls)
            latency = {key: (list(buckets), self._sums[key]) for key, buckets in self._buckets.items()}
        return calls, latency

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self._buckets.clear()
            self._sums.clear()


CALLS = CallStats()


class CallCollector(Collector):
    def __init__(self, stats: CallStats, slugs: Callable[[Iterable[int]], dict[int, str]]) -> None:
        self._stats = stats
        self._slugs = slugs

    def describe(self) -> Iterator[Any]:
        # Registration asks for the metric names; answering here keeps it from collecting.
        yield CounterMetricFamily("toolbay_tool_calls", "", labels=["tenant", "tool", "outcome"])
        yield HistogramMetricFamily("toolbay_tool_call_duration_seconds", "", labels=["tenant", "tool"])

    def collect(self) -> Iterator[Any]:
        calls, latency = self._stats.snapshot()
        names = self._slugs({key[0] for key in calls} | {key[0] for key in latency})
        counter = CounterMetricFamily(
            "toolbay_tool_calls", "tools/call recorded by this process.", labels=["tenant", "tool", "outcome"]
        )
        for (tenant_id, tool, outcome), count in sorted(calls.items()):
            counter.add_metric([names.get(tenant_id, str(tenant_id)), tool, outcome], count)
        yield counter
        histogram = HistogramMetricFamily(
            "toolbay_tool_call_duration_seconds", "Duration of recorded tools/call.", labels=["tenant", "tool"]
        )
        for (tenant_id, tool), (buckets, total) in sorted(latency.items()):
            cumulative, running = [], 0
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), buckets, strict=True):
                running += count
                cumulative.append((_bound(bound), running))
            histogram.add_metric([names.get(tenant_id, str(tenant_id)), tool], cumulative, total)
        yield histogram


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(value)


_registered: list[CallCollector] = []


def register_call_collector(slugs: Callable[[Iterable[int]], dict[int, str]]) -> None:
    """Serve CALLS at /metrics, naming tenants by ``slugs(ids)`` (read at scrape time).

    Called once Django is set up (``audit.apps``); this module itself imports no app.
    """
    if not _registered:
        collector = CallCollector(CALLS, slugs)
        REGISTRY.register(collector)
        _registered.append(collector)
