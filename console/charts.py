"""Server-rendered inline SVG charts: no JavaScript, no CDN, readable with CSS off.

Every mark carries a ``<title>`` (the browser shows it on hover) with the exact number,
so the picture never has to be read off an axis.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from audit.models import ConfirmationOutcome, Outcome
from console.stats import Overview, ToolConfirmations, ToolLatency, TopError

OUTCOME_COLORS: dict[str, str] = {
    Outcome.COMPLETED: "#2e7d32",
    Outcome.ERROR: "#ef6c00",
    Outcome.INVALID_ARGUMENTS: "#f9a825",
    Outcome.DENIED: "#6a1b9a",
    Outcome.TIMED_OUT: "#c62828",
    Outcome.CANCELLED: "#757575",
    Outcome.FAILED: "#4e342e",
    Outcome.NOT_CONFIRMED: "#ad1457",
}
CONFIRMATION_COLORS: dict[str, str] = {
    ConfirmationOutcome.GRANTED: "#2e7d32",
    ConfirmationOutcome.DECLINED: "#ad1457",
    ConfirmationOutcome.CANCELLED: "#757575",
    ConfirmationOutcome.TIMED_OUT: "#c62828",
    ConfirmationOutcome.REFUSED: "#6a1b9a",
}
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times 10^k that is >= value (axis maxima people can read)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exponent
        if candidate >= value:
            return float(candidate)
    return float(10 ** (exponent + 1))


def _number(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2g}" if value < 1 else f"{value:.1f}"


def _svg(width: int, height: int, label: str, parts: Iterable[str]) -> SafeString:
    body = "".join(parts)
    return mark_safe(  # every interpolated value is escaped or a number
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(label)}" class="chart">{body}</svg>'
    )


def calls_per_minute_chart(data: Overview, width: int = 760, height: int = 220) -> SafeString:
    left, right, top, bottom = 44, 8, 10, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    per_minute = [
        {outcome: n / data.minutes_per_bucket for outcome, n in bucket.counts.items()} for bucket in data.buckets
    ]
    peak = max((sum(values.values()) for values in per_minute), default=0.0)
    ceiling = _nice_ceiling(peak)
    slot = plot_w / max(len(data.buckets), 1)
    bar = max(slot - 1, 1)
    parts = []
    for fraction in (0, 0.5, 1):
        y = top + plot_h - fraction * plot_h
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {FONT} fill="#555">'
            f"{_number(ceiling * fraction)}</text>"
        )
    label_every = 10 if data.minutes_per_bucket == 1 else 12  # every 10 minutes, or every 3 hours
    for index, (bucket, values) in enumerate(zip(data.buckets, per_minute, strict=True)):
        x = left + index * slot
        y = top + plot_h
        for outcome in data.outcomes:
            value = values.get(outcome, 0.0)
            if not value:
                continue
            h = value / ceiling * plot_h
            y -= h
            count = bucket.counts[outcome]
            title = f"{bucket.start:%H:%M} UTC · {outcome}: {count:,} calls ({_number(value)}/min)"
            parts.append(
                f'<rect class="bar outcome-{outcome}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{OUTCOME_COLORS.get(outcome, "#999")}"><title>{escape(title)}</title></rect>'
            )
        if index % label_every == 0:
            anchor = "end" if x > width - right - 30 else "start"  # the last label stays inside
            parts.append(
                f'<text x="{x + (bar if anchor == "end" else 0):.1f}" y="{height - 6}" text-anchor="{anchor}" '
                f'{FONT} fill="#555">{bucket.start:%H:%M}</text>'
            )
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#999"/>')
    return _svg(width, height, "Calls per minute by outcome", parts)


def legend(outcomes: Iterable[str]) -> SafeString:
    items = "".join(
        f'<span class="legend-item"><span class="swatch" style="background:{OUTCOME_COLORS.get(o, "#999")}">'
        f"</span>{escape(o.replace('_', ' '))}</span>"
        for o in outcomes
    )
    return mark_safe(items)  # escaped above


def latency_chart(rows: list[ToolLatency], width: int = 760) -> SafeString:
    label_w, right, row_h, top = 170, 130, 26, 6
    height = top * 2 + row_h * max(len(rows), 1)
    plot_w = width - label_w - right
    peak = max((row.p95_ms for row in rows), default=0.0)
    ceiling = _nice_ceiling(peak)
    parts = []
    for index, row in enumerate(rows):
        y = top + index * row_h
        name = row.tool if len(row.tool) <= 26 else row.tool[:25] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 16}" text-anchor="end" {FONT} fill="#222">{escape(name)}'
            f"<title>{escape(row.tool)} · {row.calls:,} calls</title></text>"
        )
        for offset, value, color, kind in ((2, row.p95_ms, "#90caf9", "p95"), (8, row.p50_ms, "#1565c0", "p50")):
            w = max(value / ceiling * plot_w, 1)
            thickness = 18 if kind == "p95" else 6
            parts.append(
                f'<rect class="latency {kind}" x="{label_w}" y="{y + offset}" width="{w:.1f}" height="{thickness}" '
                f'fill="{color}"><title>{escape(row.tool)} {kind}: {value:,.1f} ms</title></rect>'
            )
        parts.append(
            f'<text x="{width - right + 6}" y="{y + 16}" {FONT} fill="#333">'
            f"{_number(row.p50_ms)} / {_number(row.p95_ms)} ms</text>"
        )
    if not rows:
        parts.append(f'<text x="{label_w}" y="{top + 16}" {FONT} fill="#777">No timed calls in this window.</text>')
    return _svg(width, height, "Latency p50 and p95 per tool", parts)


def errors_chart(rows: list[TopError], width: int = 760) -> SafeString:
    count_w, row_h, top = 70, 24, 6
    height = top * 2 + row_h * max(len(rows), 1)
    plot_w = width - count_w
    peak = max((row.count for row in rows), default=0)
    parts = []
    for index, row in enumerate(rows):
        y = top + index * row_h
        w = max(row.count / peak * plot_w, 2) if peak else 0
        text = f"{row.tool or '(no tool)'} · {row.outcome.replace('_', ' ')}: {row.message or '(no message)'}"
        shown = text if len(text) <= 110 else text[:109] + "…"
        parts.append(
            f'<rect class="error-bar" x="{count_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 4}" '
            f'fill="{OUTCOME_COLORS.get(row.outcome, "#999")}" fill-opacity="0.18"><title>{escape(text)}</title></rect>'
        )
        parts.append(
            f'<text x="{count_w - 8}" y="{y + 16}" text-anchor="end" {FONT} fill="#222">{row.count:,}</text>'
            f'<text x="{count_w + 6}" y="{y + 16}" {FONT} fill="#222">{escape(shown)}</text>'
        )
    if not rows:
        parts.append(f'<text x="{count_w}" y="{top + 16}" {FONT} fill="#777">No errors in this window.</text>')
    return _svg(width, height, "Most frequent errors", parts)


def declines_chart(rows: list[ToolConfirmations], width: int = 760) -> SafeString:
    """Per tool, its confirmations by what became of them: granted, then every kind of no."""
    label_w, right, row_h, top = 170, 150, 24, 6
    height = top * 2 + row_h * max(len(rows), 1)
    plot_w = width - label_w - right
    peak = max((sum(row.counts.values()) for row in rows), default=0)
    parts = []
    for index, row in enumerate(rows):
        y = top + index * row_h
        name = row.tool if len(row.tool) <= 26 else row.tool[:25] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 16}" text-anchor="end" {FONT} fill="#222">{escape(name)}</text>')
        x = float(label_w)
        for outcome, color in CONFIRMATION_COLORS.items():
            n = row.counts.get(outcome, 0)
            if not n:
                continue
            w = max(n / peak * plot_w, 1)
            title = f"{row.tool}: {n:,} {ConfirmationOutcome(outcome).label.lower()}"
            parts.append(
                f'<rect class="confirmation {outcome}" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{color}"><title>{escape(title)}</title></rect>'
            )
            x += w
        parts.append(
            f'<text x="{width - right + 6}" y="{y + 16}" {FONT} fill="#333">'
            f"{row.refused:,} refused of {sum(row.counts.values()):,}</text>"
        )
    if not rows:
        parts.append(f'<text x="{label_w}" y="{top + 16}" {FONT} fill="#777">No confirmations in this window.</text>')
    return _svg(width, height, "Confirmations per tool: granted and refused", parts)


def confirmation_legend() -> SafeString:
    items = "".join(
        f'<span class="legend-item"><span class="swatch" style="background:{color}"></span>'
        f"{escape(ConfirmationOutcome(outcome).label)}</span>"
        for outcome, color in CONFIRMATION_COLORS.items()
    )
    return mark_safe(items)  # escaped above
