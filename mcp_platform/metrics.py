"""Prometheus metrics of this process, served at ``/metrics`` (see ``mcp_platform.health``).

Every ASGI process keeps its own counters (no shared multiprocess directory), so each
process is a scrape target of its own: run one scrape job per process, or per container
with one process each, and sum in PromQL. Calls that run on Celery workers are recorded by
the worker (``audit.journal.Journal.append_now``) and so counted in the worker's memory, which no
endpoint serves; the Invocation table and the console have them all.

The call counters sit on the call path, so they are plain dict increments under one lock:
1.6 µs per call on the 2-core development machine (timeit), where prometheus_client's
labelled Counter plus Histogram took 8.2 µs. Tenant ids become slugs only when Prometheus
scrapes, and tool names become labels then too: a platform tool's name, ``private:<id>`` for
a tenant's private tool (its name is the tenant's business), and one ``(unknown)`` series
for every name that is no tool (a client can send any name; it must not mint series).

This module imports no Django and no app: ``mcp_platform.mcp`` (which stays free of both)
increments ``LIST_CHANGED_SENT`` from here, and the tenant slugs and tool labels come from
lookups the apps register (``register_call_collector``, ``register_tool_labels``).
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

UNKNOWN_TOOL = "(unknown)"
# Distinct (tenant, tool name, outcome) counters kept between scrapes before further new names count as
# UNKNOWN_TOOL: a bound on memory when nobody scrapes (each scrape folds unknown names away).
MAX_TOOL_KEYS = 10_000

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
            if (tenant_id, tool, outcome) not in self._calls and len(self._calls) >= MAX_TOOL_KEYS:
                tool = UNKNOWN_TOOL
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

    def fold(self, unknown: set[tuple[int, str]]) -> None:
        """Count the calls of these (tenant id, name) pairs as UNKNOWN_TOOL from now on."""
        with self._lock:
            for tenant_id, tool, outcome in [key for key in self._calls if key[:2] in unknown]:
                self._calls[(tenant_id, UNKNOWN_TOOL, outcome)] += self._calls.pop((tenant_id, tool, outcome))
            for key in [key for key in self._buckets if key in unknown]:
                buckets, total = self._buckets.pop(key), self._sums.pop(key, 0.0)
                into = (key[0], UNKNOWN_TOOL)
                merged = self._buckets.setdefault(into, [0] * (len(LATENCY_BUCKETS) + 1))
                for position, count in enumerate(buckets):
                    merged[position] += count
                self._sums[into] += total

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self._buckets.clear()
            self._sums.clear()


CALLS = CallStats()


ToolLabels = Callable[[Iterable[tuple[int, str]]], dict[tuple[int, str], str]]


def _no_tools(pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], str]:
    return {}


_tool_labels: list[ToolLabels] = [_no_tools]  # the one register_tool_labels set last


class CallCollector(Collector):
    def __init__(self, stats: CallStats, slugs: Callable[[Iterable[int]], dict[int, str]]) -> None:
        self._stats = stats
        self._slugs = slugs

    def _labelled(self) -> tuple[dict[tuple[int, str, str], int], dict[tuple[int, str], tuple[list[int], float]]]:
        """The stats keyed by tool label; names that are no tool are folded into UNKNOWN_TOOL."""
        calls, latency = self._stats.snapshot()
        pairs = {key[:2] for key in calls} | set(latency)
        labels = _tool_labels[-1](pair for pair in pairs if pair[1] != UNKNOWN_TOOL)
        unknown = {pair for pair in pairs if pair[1] != UNKNOWN_TOOL and pair not in labels}
        if unknown:
            self._stats.fold(unknown)
        by_label: dict[tuple[int, str, str], int] = defaultdict(int)
        for (tenant_id, tool, outcome), count in calls.items():
            by_label[(tenant_id, labels.get((tenant_id, tool), UNKNOWN_TOOL), outcome)] += count
        latency_by_label: dict[tuple[int, str], tuple[list[int], float]] = {}
        for (tenant_id, tool), (buckets, total) in latency.items():
            key = (tenant_id, labels.get((tenant_id, tool), UNKNOWN_TOOL))
            merged, merged_total = latency_by_label.get(key, ([0] * len(buckets), 0.0))
            latency_by_label[key] = ([a + b for a, b in zip(merged, buckets, strict=True)], merged_total + total)
        return dict(by_label), latency_by_label

    def describe(self) -> Iterator[Any]:
        # Registration asks for the metric names; answering here keeps it from collecting.
        yield CounterMetricFamily("toolbay_tool_calls", "", labels=["tenant", "tool", "outcome"])
        yield HistogramMetricFamily("toolbay_tool_call_duration_seconds", "", labels=["tenant", "tool"])

    def collect(self) -> Iterator[Any]:
        calls, latency = self._labelled()
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


def register_tool_labels(labels: ToolLabels) -> None:
    """Label the tools of /metrics with ``labels(pairs)``: for each (tenant id, name) called,
    the label of the tool that name is for that tenant; a pair left out is no tool.

    Called once Django is set up (``tools_app.apps``); until then every name is unknown.
    """
    _tool_labels.append(labels)


class CacheStats:
    """Counters of one per-process cache, read when Prometheus scrapes.

    Plain attributes the cache increments from the event loop (the caches are used from it
    alone): no lock and no label lookup on the request path.
    """

    __slots__ = ("bytes", "entries", "evictions", "hits", "misses")

    def __init__(self) -> None:
        self.hits = 0  # answered from memory
        self.misses = 0  # loaded (from the database)
        self.evictions = 0  # entries dropped to stay within the cache's bound
        self.entries = 0
        self.bytes = 0  # estimated memory held (0 where the cache does not estimate it)


_caches: dict[str, CacheStats] = {}


def cache_stats(name: str) -> CacheStats:
    """The counters of cache ``name`` (created on first use), served at /metrics with label
    ``cache=name``."""
    stats = _caches.get(name)
    if stats is None:
        stats = _caches[name] = CacheStats()
    return stats


class CacheCollector(Collector):
    def collect(self) -> Iterator[Any]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "hits": CounterMetricFamily(
                "toolbay_cache_hits", "Lookups this process's cache answered from memory.", labels=["cache"]
            ),
            "misses": CounterMetricFamily(
                "toolbay_cache_misses", "Lookups this process's cache had to load.", labels=["cache"]
            ),
            "evictions": CounterMetricFamily(
                "toolbay_cache_evictions",
                "Entries dropped (least recently used first) to stay within the cache's bound.",
                labels=["cache"],
            ),
            "entries": GaugeMetricFamily("toolbay_cache_entries", "Entries the cache holds now.", labels=["cache"]),
            "bytes": GaugeMetricFamily(
                "toolbay_cache_bytes", "Estimated memory the cache holds now (see the README).", labels=["cache"]
            ),
        }
        for name, stats in sorted(_caches.items()):
            for field, family in families.items():
                family.add_metric([name], getattr(stats, field))
        yield from families.values()


REGISTRY.register(CacheCollector())
