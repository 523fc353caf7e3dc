"""``report.html``: one self-contained page per campaign run.

Inline CSS, hand-written inline SVG and a little vanilla JS (hover tooltips
and show/hide filters); nothing is fetched, so the file opens offline. Every
string that comes from the run's files is escaped (:func:`esc` in text and
attributes, :func:`script_json` inside the one JSON ``<script>`` block).

Sections: the header (scenario, verdict, counts, options), the node
timeline (with the band of two leaders at once), latency over time,
throughput over time, the failed and indeterminate operations by reason and
node, staleness (``_staleness``: how far behind the reads were, per mode,
node and fault window), the anomalies with their witness operations, and a
footer with the input files. All charts share one time axis (seconds since the run began),
so one x position is one instant in every chart.

Labels never overlap: the layouts place them (fault names in rows, witness
labels on free lines near their marks) with the widths ``text_width_px``
gives, and draw each at exactly that width (``textLength``). Colours come
from ``_palette.py``, one per meaning.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Iterable, Mapping, Sequence

from ._leaders import concurrent_leaders
from ._load import (
    KILLING_FAULTS,
    MEMBERSHIP_FAULTS,
    NO_NODE,
    OUTCOMES,
    Fault,
    Op,
    RunData,
    failure_breakdown,
    load_run,
    node_order,
    witness_node_events,
    witness_operations,
)
from ._palette import (
    BROKER_STATE_STYLE,
    DISK,
    DOWN,
    FAULT,
    HEAL,
    HOSTILE,
    OTHER_OP_COLOUR,
    OTHER_ROLE,
    OUTCOME_COLOURS,
    ROLE_STYLE,
    TWO_LEADERS,
    VOTERS,
    VOTERS_PALE,
    WITNESS,
    op_colours,
    rgba,
)
from ._memory import MEMORY_CSS, memory_section
from ._staleness import STALENESS_CSS, staleness_section
from ._svg import (
    LogScale,
    TimeScale,
    compact_json,
    duration_text,
    esc,
    latency_text,
    label_text,
    linear_ticks,
    ms_label,
    num,
    overlaps,
    script_json,
    seconds,
    text_width_px,
    tick_label,
)

# ---------------------------------------------------------------- layout
WIDTH = 1320          # every chart's viewBox width
LEFT = 112            # label column
RIGHT = 16
PLOT_W = WIDTH - LEFT - RIGHT
LANE_H = 40           # a lane: the role band, then a strip for faults about the node
BAND_TOP = 1
BAND_H = 30
STRIP_H = 6
LANE_GAP = 8
FAULT_ROW_H = 17
LEADERS_ROW_H = 16
PANEL_H = 150
PANEL_GAP = 40
THROUGHPUT_H = 170
AXIS_H = 26

# Points drawn per latency panel before the scatter is thinned.
MAX_POINTS_PER_PANEL = 3000

# Colours: one per meaning, all in _palette.py.

CHECK_EXPLANATIONS = {
    "stale-read": "an ok read that misses a write acknowledged before it began (beyond the read mode's staleness bound)",
    "non-monotonic-read-process": "a process read an older state (lower offset) than it had already read",
    "non-monotonic-read-broker": "a broker served an older state than it had already served",
    "garbage-read": "a read returned a value nobody ever wrote",
    "aborted-read": "a read returned a value only failed writes wrote",
    "future-read": "a read returned a value whose write was invoked after the read completed",
    "lost-write": "an acknowledged write is missing from the final reads or the committed logs",
    "split-brain": "two different leaders were claimed for one epoch",
    "forked-log": "two nodes committed different records at one offset",
    "duplicated-write": "one write was committed at two offsets",
    "broker-epoch-regression": "a broker's registration epoch went backwards",
    "stale-broker-epoch": "a request carrying a fenced broker epoch was accepted",
    "fenced-broker-read": "a fenced broker served a read",
    "linearizability": "no order of the operations on a key agrees with a single register",
}


# =========================================================================
# Entry point
# =========================================================================


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write ``report.html`` for a campaign run directory and return its path.

    ``out`` defaults to ``RUN_DIR/report.html``. A missing ``results.json``
    is reported as "not checked"; other missing or damaged inputs are said
    in the page. Raises ``OSError`` only when the page cannot be written.
    """
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    page = render_report(load_run(run_dir), out=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(out)
    return out


def render_report(data: RunData, out: Path | None = None) -> str:
    scale = TimeScale(data.end_ns, LEFT, PLOT_W)
    witnesses = collect_witnesses(data.results)
    title = f"{data.scenario} · {data.run_dir.name}"
    body = [
        _header(data, witnesses),
        _timeline_section(data, scale, witnesses),
        _latency_section(data, scale, witnesses),
        _throughput_section(data, scale),
        memory_section(data.run_dir, LEFT, PLOT_W, WIDTH),
        _failures_section(data),
        staleness_section(data.results),
        _anomalies_section(data, witnesses),
        _footer(data, out),
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{esc(title)} — pykraft campaign report</title>\n<style>{CSS}{STALENESS_CSS}{MEMORY_CSS}</style>\n</head>\n"
        "<body>\n<div id=\"tip\" hidden></div>\n<main>\n" + "\n".join(body) + "\n</main>\n"
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


# =========================================================================
# Witnesses
# =========================================================================


@dataclass(slots=True)
class Mark:
    """One operation a witness names, to mark on the charts."""

    check: str
    number: int  # the witness's number within its check, from 1
    anchor: str
    role: str
    op: Mapping[str, Any]
    primary: bool


@dataclass(slots=True)
class CheckWitnesses:
    name: str
    slug: str
    check: Mapping[str, Any]
    marks: list[Mark]
    node_marks: list[tuple[str, int, Mapping[str, Any]]]  # (anchor, number, node event)


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "check"
    slug, n = base, 2
    while slug in used:
        slug, n = f"{base}-{n}", n + 1
    used.add(slug)
    return slug


def _checks(results: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    checks = (results or {}).get("checks")
    if not isinstance(checks, Mapping):
        return []
    return [(str(name), check) for name, check in checks.items() if isinstance(check, Mapping)]


def collect_witnesses(results: Mapping[str, Any] | None) -> list[CheckWitnesses]:
    """Failed (and unknown) checks with the operations their witnesses name."""
    found = []
    used: set[str] = set()
    for name, check in _checks(results):
        if check.get("status") not in ("fail", "unknown"):
            continue
        slug = _slug(name, used)
        marks: list[Mark] = []
        node_marks = []
        witnesses = check.get("witnesses") if isinstance(check.get("witnesses"), list) else []
        for number, witness in enumerate(witnesses, start=1):
            anchor = f"w-{slug}-{number}"
            for position, (role, op) in enumerate(witness_operations(witness)):
                marks.append(Mark(name, number, anchor, role, op, position == 0))
            for _, event in witness_node_events(witness):
                node_marks.append((anchor, number, event))
        found.append(CheckWitnesses(name, slug, check, marks, node_marks))
    return found


def _mark_times(op: Mapping[str, Any]) -> tuple[int | None, int | None]:
    def as_int(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return as_int(op.get("time")), as_int(op.get("complete_time"))


# =========================================================================
# Header
# =========================================================================


def _verdict(results: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(css class, big word, one line)."""
    if results is None:
        return "none", "NOT CHECKED", "no results.json in the run directory: the history was not checked"
    valid = results.get("valid")
    checker = results.get("checker")
    by = f" by the {checker} checker" if checker else ""
    if valid is True:
        return "valid", "VALID", f"every check passed{by}"
    if valid is False:
        return "invalid", "INVALID", f"anomalies found{by}"
    if valid == "unknown":
        return "unknown", "UNKNOWN", f"no anomaly found, but a check could not finish{by}"
    return "unknown", compact_json(valid, 20).upper(), "the results give no verdict"


def _header(data: RunData, witnesses: Sequence[CheckWitnesses]) -> str:
    css, word, line = _verdict(data.results)
    # Every operation's outcome, also when the charts draw a sample.
    outcomes = data.outcome_totals or Counter(op.outcome or "pending" for op in data.ops)
    faults_by_kind = Counter(fault.f for fault in data.faults)
    facts = [
        ("duration", duration_text(data.end_ns)),
        ("operations", f"{sum(outcomes.values()):,}"),
        ("ok", f"{outcomes['ok']:,}"),
        ("fail", f"{outcomes['fail']:,}"),
        ("info", f"{outcomes['info']:,}"),
    ]
    if outcomes["pending"]:
        facts.append(("never completed", f"{outcomes['pending']:,}"))
    meta_faults = data.meta.get("faults")
    fault_text = f"{len(data.faults)}"
    if isinstance(meta_faults, int) and meta_faults != len(data.faults):
        fault_text += f" (meta.json: {meta_faults})"
    facts.append(("faults", fault_text))
    facts.append(("nodes", str(len(data.nodes))))
    fact_html = "".join(
        f"<div class=\"fact\"><div class=\"fact-v\">{esc(value)}</div><div class=\"fact-k\">{esc(key)}</div></div>"
        for key, value in facts
    )
    failed = "".join(
        f"<a class=\"chip chip-{'fail' if c.check.get('status') == 'fail' else 'unknown'}\" href=\"#check-{esc(c.slug)}\">"
        + (f"{esc(c.name)} × {esc(c.check.get('count', '?'))}" if c.check.get("status") == "fail" else f"{esc(c.name)} unknown")
        + "</a>"
        for c in witnesses
    )
    kinds = " · ".join(f"{esc(kind)} × {count}" for kind, count in sorted(faults_by_kind.items()))
    options = "".join(
        f"<span class=\"opt\"><b>{esc(key)}</b> {esc(compact_json(value, 60) if not isinstance(value, str) else value)}</span>"
        for key, value in data.options.items()
    )
    meta_extra = {k: v for k, v in data.meta.items() if k not in ("campaign", "faults")}
    meta_html = "".join(
        f"<span class=\"opt\"><b>{esc(key)}</b> {esc(compact_json(value, 60) if not isinstance(value, str) else value)}</span>"
        for key, value in meta_extra.items()
    )
    per_type = _ops_table(data)
    warnings = ""
    if data.warnings:
        warnings = "<ul class=\"warnings\">" + "".join(f"<li>{esc(w)}</li>" for w in data.warnings) + "</ul>"
    return f"""<header class="card verdict-{css}" id="summary">
<div class="head-row">
 <div class="titles">
  <div class="kicker">pykraft fault-injection campaign</div>
  <h1>{esc(data.scenario)}</h1>
  <div class="run-id">{esc(data.run_dir.name)}</div>
 </div>
 <div class="verdict"><div class="verdict-word">{esc(word)}</div><div class="verdict-line">{esc(line)}</div>
 {f'<div class="chips">{failed}</div>' if failed else ''}</div>
</div>
<div class="facts">{fact_html}</div>
<div class="head-cols">
 <div>{per_type}</div>
 <div class="opts">
  <div class="opts-title">faults</div><div>{kinds or 'none'}</div>
  <div class="opts-title">options</div><div>{options or '<span class="muted">no options.json</span>'}</div>
  {f'<div class="opts-title">checker meta</div><div>{meta_html}</div>' if meta_html else ''}
 </div>
</div>
{warnings}
<nav><a href="#timeline">timeline</a><a href="#latency">latency</a><a href="#throughput">throughput</a><a href="#memory">memory</a><a href="#failures">failures</a><a href="#staleness">staleness</a><a href="#anomalies">anomalies</a><a href="#files">files</a></nav>
</header>"""


def _ops_table(data: RunData) -> str:
    counts: dict[str, Counter] = defaultdict(Counter)
    latencies: dict[str, list[float]] = defaultdict(list)
    for op in data.ops:
        counts[op.f][op.outcome or "pending"] += 1
        if op.outcome == "ok" and op.latency_ms is not None:
            latencies[op.f].append(op.latency_ms)
    rows = []
    for f in data.op_types:
        c = counts[f]
        lat = sorted(latencies[f])
        p50 = latency_text(lat[len(lat) // 2]) if lat else "–"
        p99 = latency_text(lat[min(len(lat) - 1, int(len(lat) * 0.99))]) if lat else "–"
        rows.append(
            f"<tr><th>{esc(f)}</th><td>{sum(c.values()):,}</td><td class=\"c-ok\">{c['ok']:,}</td>"
            f"<td class=\"c-fail\">{c['fail']:,}</td><td class=\"c-info\">{c['info']:,}</td>"
            f"<td>{c['pending']:,}</td><td>{p50}</td><td>{p99}</td></tr>"
        )
    if not rows:
        return "<p class=\"muted\">no client operations in the history</p>"
    return (
        "<table class=\"ops\"><thead><tr><th>op</th><th>all</th><th>ok</th><th>fail</th><th>info</th>"
        "<th title=\"invoked, never completed\">open</th><th>ok p50</th><th>ok p99</th></tr></thead><tbody>"
        + "".join(rows) + "</tbody></table>"
    )


# =========================================================================
# Shared chart pieces
# =========================================================================


def _svg_open(css_class: str, height: float, label: str) -> str:
    return (
        f"<svg class=\"chart {css_class}\" viewBox=\"0 0 {WIDTH} {num(height)}\" width=\"{WIDTH}\" "
        f"height=\"{num(height)}\" role=\"img\" aria-label=\"{esc(label)}\" xmlns=\"http://www.w3.org/2000/svg\">"
    )


def _time_axis(scale: TimeScale, y: float, grid_top: float | None = None) -> str:
    parts = [f"<line class=\"axis\" x1=\"{num(scale.left)}\" x2=\"{num(scale.right)}\" y1=\"{num(y)}\" y2=\"{num(y)}\"/>"]
    for t in scale.ticks():
        x = scale.x(t * 1e9)
        if grid_top is not None:
            parts.append(f"<line class=\"grid\" x1=\"{num(x)}\" x2=\"{num(x)}\" y1=\"{num(grid_top)}\" y2=\"{num(y)}\"/>")
        parts.append(f"<line class=\"axis\" x1=\"{num(x)}\" x2=\"{num(x)}\" y1=\"{num(y)}\" y2=\"{num(y + 4)}\"/>")
        parts.append(f"<text class=\"tick\" x=\"{num(x)}\" y=\"{num(y + 16)}\" text-anchor=\"middle\">{tick_label(t)}</text>")
    parts.append(f"<text class=\"tick\" x=\"{num(scale.left - 8)}\" y=\"{num(y + 16)}\" text-anchor=\"end\">s</text>")
    return "".join(parts)


def _fault_shades(data: RunData, scale: TimeScale, top: float, bottom: float, strong: bool) -> str:
    parts = []
    for fault in data.faults:
        x0 = scale.x(fault.start_ns)
        x1 = scale.x(fault.end_ns if fault.end_ns is not None else data.end_ns)
        tip = _fault_tip(fault, data.end_ns)
        parts.append(
            f"<rect class=\"fault-shade{' strong' if strong else ''}\" x=\"{num(x0)}\" y=\"{num(top)}\" "
            f"width=\"{num(max(1.0, x1 - x0))}\" height=\"{num(bottom - top)}\"><title>{esc(tip)}</title></rect>"
        )
        if strong:
            for x in (x0, x1):
                parts.append(f"<line class=\"fault-edge\" x1=\"{num(x)}\" x2=\"{num(x)}\" y1=\"{num(top)}\" y2=\"{num(bottom)}\"/>")
    for time_ns, f, _ in data.instants:
        x = scale.x(time_ns)
        parts.append(
            f"<line class=\"instant\" x1=\"{num(x)}\" x2=\"{num(x)}\" y1=\"{num(top)}\" y2=\"{num(bottom)}\">"
            f"<title>{esc(f)} at {seconds(time_ns)} s</title></line>"
        )
    return "".join(parts)


def _fault_tip(fault: Fault, end_ns: int) -> str:
    end = f"{seconds(fault.end_ns)} s" if fault.end_ns is not None else "the end (never healed in the history)"
    ended = f"\nat its end: {compact_json(fault.end_fault, 300)}" if fault.end_fault is not None else ""
    return f"{fault.label()}: {seconds(fault.start_ns)} s – {end}\n{compact_json(fault.fault, 300)}{ended}"


def _op_colour(data: RunData) -> dict[str, str]:
    return op_colours(data.op_types)


# =========================================================================
# Timeline
# =========================================================================


def _assign_rows(items: Sequence[tuple[float, float]]) -> list[int]:
    """Greedy interval rows: items (x0, x1) that overlap go to different rows."""
    row_ends: list[float] = []
    rows = []
    for x0, x1 in items:
        for row, end in enumerate(row_ends):
            if x0 >= end + 4:
                row_ends[row] = x1
                rows.append(row)
                break
        else:
            row_ends.append(x1)
            rows.append(len(row_ends) - 1)
    return rows


def _text_px(text: str, size: float = 11, *, bold: bool = True) -> float:
    """A label's width with room around it."""
    return text_width_px(text, size, bold=bold) + 6


@dataclass(slots=True)
class _TopLabel:
    """A fault window's or an instant's name above the lanes: its extent in
    its row (the window's bar and the text, whichever reach further)."""

    left: float
    right: float
    text_x: float
    kind: str  # "fault" or "instant"
    item: Any


def _top_labels(data: RunData, scale: TimeScale) -> list[tuple[_TopLabel, int]]:
    """Every fault and instant named once, in rows: an item goes to the
    first row whose last item ends 4 px before it begins, so no two names
    (nor bars) in a row touch. Deterministic: items in order of their
    left edge, then kind and label."""
    labels: list[_TopLabel] = []
    for fault in data.faults:
        start = scale.x(fault.start_ns)
        end = scale.x(fault.end_ns if fault.end_ns is not None else data.end_ns)
        width = text_width_px(fault.label())
        # A name that would run off the right edge starts further left.
        text_x = min(start + 4, WIDTH - 2 - width)
        labels.append(_TopLabel(min(start, text_x - 4), max(end, text_x + width), text_x, "fault", fault))
    for time_ns, f, value in data.instants:
        x = scale.x(time_ns)
        width = text_width_px(f)
        text_x = min(x + 2, WIDTH - 2 - width)
        labels.append(_TopLabel(min(x, text_x), text_x + width, text_x, "instant", (time_ns, f, value)))
    labels.sort(key=lambda label: (label.left, label.kind, label.text_x, _top_label_text(label)))
    rows = _assign_rows([(label.left, label.right) for label in labels])
    return list(zip(labels, rows))


def _top_label_text(label: _TopLabel) -> str:
    return label.item.label() if label.kind == "fault" else str(label.item[1])


def _two_leaders_row(data: RunData, scale: TimeScale, y: float) -> str:
    """The band of periods in which two controllers each believed they led
    (from their role events; shared with the simulator's replay)."""
    spans = data.role_spans()
    leading = [
        (node, span.start_ns, span.end_ns, span.epoch)
        for node in data.nodes
        if node not in data.broker_nodes
        for span in spans.get(node, [])
        if span.role == "leader"
    ]
    parts = [
        f"<text class=\"lane-sub\" x=\"{num(scale.left - 10)}\" y=\"{num(y + 12)}\" text-anchor=\"end\">two leaders</text>",
        f"<rect class=\"lane-bg\" x=\"{num(scale.left)}\" y=\"{num(y)}\" width=\"{num(PLOT_W)}\" height=\"{LEADERS_ROW_H}\"/>",
    ]
    windows = concurrent_leaders(leading)
    for start, end, leaders in windows:
        x0, x1 = scale.x(start), scale.x(end)
        names = " + ".join(f"n{node} e{epoch}" for node, epoch in leaders)
        tip = f"{len(leaders)} leaders at once, {seconds(start)} s – {seconds(end)} s ({duration_text(end - start)}): {names}"
        w = max(1.5, x1 - x0)
        parts.append(
            f"<g class=\"two-leaders\"><rect x=\"{num(x0)}\" y=\"{num(y + 1)}\" width=\"{num(w)}\" height=\"{LEADERS_ROW_H - 2}\" rx=\"2\"/>"
            f"{_fit_text(f'{len(leaders)} leaders: {names}', x0, w, y + 12, 'two-leaders-text', f'{len(leaders)} leaders', str(len(leaders)))}"
            f"<title>{esc(tip)}</title></g>"
        )
    if not windows:
        parts.append(f"<text class=\"lane-empty\" x=\"{num(scale.left + 8)}\" y=\"{num(y + 12)}\">never two at once</text>")
    return "".join(parts)


def _timeline_section(data: RunData, scale: TimeScale, witnesses: Sequence[CheckWitnesses]) -> str:
    # Fault and instant labels, in rows above the lanes; then the band of
    # two leaders at once (when there are controllers).
    labelled = _top_labels(data, scale)
    fault_rows = max((row for _, row in labelled), default=-1) + 1
    top = 8
    leaders_top = top + fault_rows * FAULT_ROW_H + (6 if fault_rows else 0)
    has_controllers = any(node not in data.broker_nodes for node in data.nodes)
    lanes_top = leaders_top + (LEADERS_ROW_H + 8 if has_controllers else 0)
    lanes_bottom = lanes_top + len(data.nodes) * (LANE_H + LANE_GAP) - LANE_GAP
    marks = [m for c in witnesses for m in c.marks if m.primary]
    node_marks = [nm for c in witnesses for nm in c.node_marks]
    anomaly_top = lanes_bottom + 8
    anomaly_h = 16 if (marks or node_marks) else 0
    axis_y = anomaly_top + anomaly_h + (6 if anomaly_h else 0)
    height = axis_y + AXIS_H

    parts = [_svg_open("timeline", height, "node roles and fault windows over time")]
    parts.append(HATCH_DEFS)
    parts.append(_time_axis(scale, axis_y, grid_top=lanes_top))
    # Lanes: background, hatches for faults that target the node, role spans.
    spans = data.role_spans()
    non_voter = data.non_voter_spans()
    targeted: dict[str, list[Fault]] = defaultdict(list)
    for fault in data.faults:
        for node in fault.target_nodes():
            targeted[node].append(fault)
    for position, node in enumerate(data.nodes):
        y = lanes_top + position * (LANE_H + LANE_GAP)
        node_spans = spans.get(node, [])
        is_broker = node in data.broker_nodes
        if is_broker:
            epochs = sorted({str(s.epoch) for s in node_spans if s.epoch is not None}, key=lambda e: (len(e), e))
            sub = ("epochs " + ",".join(epochs)) if epochs else "never registered"
        else:
            led = sorted({str(s.epoch) for s in node_spans if s.role == "leader"}, key=lambda e: (len(e), e))
            sub = ("led e" + ",".join(led)) if led else "never led"
        if len(sub) > 17:
            sub = sub[:16] + "…"
        parts.append(f"<g class=\"lane\" data-node=\"{esc(node)}\">")
        parts.append(f"<rect class=\"lane-bg\" x=\"{num(scale.left)}\" y=\"{num(y)}\" width=\"{num(PLOT_W)}\" height=\"{LANE_H}\"/>")
        parts.append(f"<text class=\"lane-label\" x=\"{num(scale.left - 10)}\" y=\"{num(y + 17)}\" text-anchor=\"end\">{'broker' if is_broker else 'node'} {esc(node if len(node) <= 10 else node[:9] + '…')}</text>")
        parts.append(f"<text class=\"lane-sub\" x=\"{num(scale.left - 10)}\" y=\"{num(y + 31)}\" text-anchor=\"end\">{esc(sub)}</text>")
        for fault in targeted.get(node, []):
            parts.append(_target_overlay(fault, scale, y, data.end_ns, under=True))
        for span in node_spans:
            parts.append(_broker_state_rect(span, scale, y) if is_broker else _role_rect(span, scale, y))
        for fault in targeted.get(node, []):
            parts.append(_target_overlay(fault, scale, y, data.end_ns, under=False))
        for start_ns, end_ns in non_voter.get(node, []):
            parts.append(_non_voter_overlay(node, start_ns, end_ns, scale, y))
        if not node_spans:
            parts.append(
                f"<text class=\"lane-empty\" x=\"{num(scale.left + 8)}\" y=\"{num(y + 21)}\">"
                f"{'no state events from this broker' if is_broker else 'no role events from this node'}</text>"
            )
        parts.append("</g>")
    # Fault windows across every lane, with their names above.
    parts.append(_fault_shades(data, scale, lanes_top - 4, lanes_bottom + 4, strong=True))
    for label, row in labelled:
        y = top + row * FAULT_ROW_H
        if label.kind == "fault":
            fault = label.item
            start = scale.x(fault.start_ns)
            end = scale.x(fault.end_ns if fault.end_ns is not None else data.end_ns)
            parts.append(
                f"<g class=\"fault-label\"><title>{esc(_fault_tip(fault, data.end_ns))}</title>"
                f"<rect x=\"{num(start)}\" y=\"{num(y)}\" width=\"{num(max(2.0, end - start))}\" height=\"{FAULT_ROW_H - 3}\" rx=\"2\"/>"
                f"{label_text(fault.label(), label.text_x, y + 11)}</g>"
            )
        else:
            time_ns, f, _ = label.item
            parts.append(
                f"<g class=\"instant-label\"><title>{esc(f)} at {seconds(time_ns)} s</title>"
                f"{label_text(f, label.text_x, y + 11)}</g>"
            )
    if has_controllers:
        parts.append(_two_leaders_row(data, scale, leaders_top))
    # Anomalies: when each witness's operation ran, and node events witnesses name.
    if anomaly_h:
        parts.append(f"<text class=\"lane-sub\" x=\"{num(scale.left - 10)}\" y=\"{num(anomaly_top + 12)}\" text-anchor=\"end\">anomalies</text>")
        parts.append(f"<rect class=\"lane-bg\" x=\"{num(scale.left)}\" y=\"{num(anomaly_top)}\" width=\"{num(PLOT_W)}\" height=\"{anomaly_h}\"/>")
        for mark in marks:
            start, end = _mark_times(mark.op)
            if start is None:
                continue
            x0 = scale.x(start)
            x1 = scale.x(end if end is not None else data.end_ns)
            parts.append(
                f"<a class=\"wm\" href=\"#{esc(mark.anchor)}\"><rect class=\"wm-bar\" x=\"{num(x0 - 1)}\" y=\"{num(anomaly_top + 2)}\" "
                f"width=\"{num(max(3.0, x1 - x0 + 2))}\" height=\"{anomaly_h - 4}\"/>"
                f"<title>{esc(_mark_tip(mark))}</title></a>"
            )
        node_y = {node: lanes_top + i * (LANE_H + LANE_GAP) for i, node in enumerate(data.nodes)}
        for anchor, number, event in node_marks:
            node = str(event.get("node"))
            t = event.get("time")
            if node not in node_y or not isinstance(t, (int, float)):
                continue
            x, y = scale.x(t), node_y[node] + BAND_TOP + BAND_H / 2
            parts.append(
                f"<a class=\"wm\" href=\"#{esc(anchor)}\"><path class=\"wm-diamond\" d=\"M{num(x)} {num(y - 8)}l7 8-7 8-7-8z\"/>"
                f"<title>{esc(f'witness #{number}: ' + compact_json(event, 200))}</title></a>"
            )
    parts.append("</svg>")
    legend = "".join(
        f"<span class=\"key\"><i style=\"background:{fill}\"></i>{esc(role)}</span>" for role, (fill, _, _, _) in ROLE_STYLE.items()
    )
    if data.broker_nodes:
        legend += "".join(
            f"<span class=\"key\"><i style=\"background:{fill}\"></i>broker {esc(state)}</span>"
            for state, (fill, _, _, _) in BROKER_STATE_STYLE.items()
        )
    legend += "<span class=\"key\"><i class=\"k-fault\"></i>fault window</span>"
    legend += "<span class=\"key\"><i class=\"k-net\"></i>the node a network fault is about</span>"
    legend += "<span class=\"key\"><i class=\"k-down\"></i>node killed / paused</span>"
    if has_controllers:
        legend += "<span class=\"key\"><i class=\"k-two\"></i>two leaders at once</span>"
    if data.instants:
        legend += "<span class=\"key\"><i class=\"k-heal\"></i>heal, or another nemesis instant</span>"
    if any(is_hostile(fault.f) for fault in data.faults):
        legend += "<span class=\"key\"><i class=\"k-hostile\"></i>hostile clients at the node's port</span>"
    if any(is_storage(fault.f) for fault in data.faults):
        legend += "<span class=\"key\"><i class=\"k-disk\"></i>storage fault: the node's files damaged while it was down, or its disk full</span>"
    if any(fault.f in MEMBERSHIP_FAULTS for fault in data.faults):
        legend += "<span class=\"key\"><i class=\"k-voters\"></i>voter change: the node added, removed or given a new disk</span>"
    if any(non_voter.values()):
        legend += "<span class=\"key\"><i class=\"k-non-voter\"></i>not a voter (an observer) then</span>"
    if anomaly_h:
        legend += f"<span class=\"key\"><i style=\"background:{WITNESS}\"></i>anomaly witness</span>"
    return f"""<section class="card" id="timeline">
<h2>Node timeline</h2>
<p class="lede">One lane per node: a controller's Raft role over time, labelled with the epoch (a follower also names its leader: <code>→n3</code>); a broker's state (online, fenced, stopping, offline) with its broker epoch.
Shaded columns are fault windows, named above the lanes; a hatched strip under a lane marks the node a fault is about (cut off, killed, paused, under hostile client traffic, or with its files damaged or its disk full).</p>
<div class="legend">{legend}</div>
<div class="scroll">{''.join(parts)}</div>
</section>"""


HATCH_DEFS = (
    "<defs>"
    "<pattern id=\"hatch-down\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
    f"<rect width=\"6\" height=\"6\" fill=\"{DOWN}\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#94a3b8\" stroke-width=\"3\"/></pattern>"
    "<pattern id=\"hatch-pause\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
    "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#334155\" stroke-width=\"2\" stroke-opacity=\".55\"/></pattern>"
    "<pattern id=\"hatch-net\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">"
    f"<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"{FAULT}\" stroke-width=\"2\"/></pattern>"
    "<pattern id=\"hatch-hostile\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
    f"<rect width=\"6\" height=\"6\" fill=\"#fff7ed\"/><circle cx=\"3\" cy=\"3\" r=\"1.6\" fill=\"{HOSTILE}\"/></pattern>"
    "<pattern id=\"hatch-disk\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
    f"<rect width=\"6\" height=\"6\" fill=\"#f5f3ff\"/><rect x=\"1\" y=\"1\" width=\"4\" height=\"4\" fill=\"{DISK}\"/></pattern>"
    "<pattern id=\"hatch-voters\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
    f"<rect width=\"6\" height=\"6\" fill=\"{VOTERS_PALE}\"/><rect x=\"0\" y=\"2\" width=\"6\" height=\"2\" fill=\"{VOTERS}\"/></pattern>"
    "<pattern id=\"hatch-non-voter\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">"
    "<rect width=\"8\" height=\"8\" fill=\"#ffffff\" fill-opacity=\".55\"/>"
    f"<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"{VOTERS}\" stroke-width=\"2\" stroke-opacity=\".6\"/></pattern>"
    "</defs>"
)


def _non_voter_overlay(node: str, start_ns: int, end_ns: int, scale: TimeScale, y: float) -> str:
    """A controller outside the voter set: its band is veiled and says so
    (it still has a role: an observer follows the leader)."""
    x0, x1 = scale.x(start_ns), scale.x(end_ns)
    w = max(1.5, x1 - x0)
    tip = f"node {node} is not a voter: {seconds(start_ns)} s – {seconds(end_ns)} s"
    return (
        f"<g class=\"non-voter\"><rect x=\"{num(x0)}\" y=\"{num(y + BAND_TOP)}\" width=\"{num(w)}\" height=\"{BAND_H}\" "
        f"fill=\"url(#hatch-non-voter)\"/>{_fit_text('not a voter', x0, w, y + BAND_TOP + 12, 'target-text')}"
        f"<title>{esc(tip)}</title></g>"
    )


def _target_overlay(fault: Fault, scale: TimeScale, y: float, end_ns: int, *, under: bool) -> str:
    """A fault that is about this node: a hatched strip under the lane's
    band; a kill also hatches the band (a dead process has no role), a
    pause hatches over it (a frozen process keeps its role)."""
    x0 = scale.x(fault.start_ns)
    x1 = scale.x(fault.end_ns if fault.end_ns is not None else end_ns)
    w = max(1.5, x1 - x0)
    tip = f"<title>{esc(_fault_tip(fault, end_ns))}</title>"
    if is_storage(fault.f):
        pattern = "hatch-disk"
    elif fault.f in MEMBERSHIP_FAULTS:
        pattern = "hatch-voters"
    elif fault.f in PROCESS_FAULTS:
        pattern = "hatch-down"
    else:
        pattern = "hatch-hostile" if is_hostile(fault.f) else "hatch-net"
    strip_y = y + LANE_H - STRIP_H
    if under:
        if fault.f not in KILLING_FAULTS:
            return ""
        return (
            f"<g class=\"target\"><rect x=\"{num(x0)}\" y=\"{num(y + BAND_TOP)}\" width=\"{num(w)}\" height=\"{BAND_H}\" fill=\"url(#hatch-down)\"/>"
            f"{_fit_text('killed', x0, w, y + BAND_TOP + BAND_H / 2 + 4, 'target-text')}{tip}</g>"
        )
    over = ""
    if fault.f == "pause":
        over = f"<rect x=\"{num(x0)}\" y=\"{num(y + BAND_TOP)}\" width=\"{num(w)}\" height=\"{BAND_H}\" fill=\"url(#hatch-pause)\"/>"
    return (
        f"<g class=\"target\">{over}<rect x=\"{num(x0)}\" y=\"{num(strip_y)}\" width=\"{num(w)}\" height=\"{STRIP_H}\" "
        f"fill=\"url(#{pattern})\"/>{tip}</g>"
    )


def _fit_text(
    text: str, x: float, width: float, y: float, css: str, *shorter: str, fill: str | None = None, bold: bool = True
) -> str:
    """The longest of ``text`` and its ``shorter`` forms that fits in
    ``width`` px from ``x``, or nothing."""
    style = f" fill=\"{fill}\"" if fill else ""
    for candidate in (text, *shorter):
        if candidate and _text_px(candidate, bold=bold) + 4 <= width:
            return label_text(candidate, x + 4, y, css, bold=bold, attrs=style)
    return ""


# Faults that stop or restart a process (the rest are network faults, and
# hostile client traffic: ``hostile-<kind>``).
PROCESS_FAULTS = ("kill", "pause", "fast-bounce", "controlled-shutdown", "restart")


def is_storage(f: str) -> bool:
    """A storage fault of the ``storage`` campaign: ``storage-<kind>``
    (files damaged while the node was down), ``restart-all-voters``,
    ``disk-full``."""
    return f.startswith("storage-") or f in ("restart-all-voters", "disk-full")


def is_hostile(f: str) -> bool:
    """A hostile-clients fault (the campaign's ``hostile-<kind>``)."""
    return f.startswith("hostile-")


def _role_rect(span: Any, scale: TimeScale, y: float) -> str:
    fill, ink, inset, letter = ROLE_STYLE.get(span.role, OTHER_ROLE)
    x0 = scale.x(span.start_ns)
    x1 = scale.x(span.end_ns)
    w = max(1.0, x1 - x0 - 0.8)
    epoch = f"e{span.epoch}" if span.epoch is not None else ""
    label = medium = f"{span.role} {epoch}".strip()
    if span.role == "follower" and span.leader is not None:
        label += f" →n{span.leader}"
    short = f"{letter}{span.epoch if span.epoch is not None else ''}"
    leader = f", leader {span.leader}" if span.leader is not None and span.role != "leader" else ""
    tip = (
        f"node {span.node}: {span.role}, epoch {span.epoch}{leader}\n"
        f"{seconds(span.start_ns)} s – {seconds(span.end_ns)} s ({duration_text(span.end_ns - span.start_ns)})"
    )
    css = "role role-leader" if span.role == "leader" else "role"
    text = _fit_text(label, x0, w, y + BAND_TOP + BAND_H / 2 + 4, "role-text", medium, short, fill=ink, bold=span.role == "leader")
    return (
        f"<g class=\"{css}\" data-role=\"{esc(span.role)}\"><rect x=\"{num(x0)}\" y=\"{num(y + BAND_TOP + inset)}\" width=\"{num(w)}\" "
        f"height=\"{num(BAND_H - 2 * inset)}\" rx=\"2\" fill=\"{fill}\"/>{text}<title>{esc(tip)}</title></g>"
    )


def _broker_state_rect(span: Any, scale: TimeScale, y: float) -> str:
    """A broker's state band: online (teal, nearly full height), fenced
    (red), stopping (violet), offline (grey), labelled with its epoch."""
    fill, ink, inset, letter = BROKER_STATE_STYLE.get(span.role, OTHER_ROLE)
    x0 = scale.x(span.start_ns)
    x1 = scale.x(span.end_ns)
    w = max(1.0, x1 - x0 - 0.8)
    epoch = f"epoch {span.epoch}" if span.epoch is not None else ""
    tip = (
        f"broker {span.node}: {span.role}, broker epoch {span.epoch}\n"
        f"{seconds(span.start_ns)} s – {seconds(span.end_ns)} s ({duration_text(span.end_ns - span.start_ns)})"
    )
    text = _fit_text(f"{span.role} {epoch}".strip(), x0, w, y + BAND_TOP + BAND_H / 2 + 4, "role-text", span.role, letter, fill=ink, bold=False)
    return (
        f"<g class=\"role broker-state\" data-role=\"{esc(span.role)}\"><rect x=\"{num(x0)}\" y=\"{num(y + BAND_TOP + inset)}\" "
        f"width=\"{num(w)}\" height=\"{num(BAND_H - 2 * inset)}\" rx=\"2\" fill=\"{fill}\"/>{text}<title>{esc(tip)}</title></g>"
    )


def _mark_tip(mark: Mark) -> str:
    op = mark.op
    start, end = _mark_times(op)
    latency = latency_text((end - start) / 1e6) if start is not None and end is not None else "no completion"
    value = op.get("value", op.get("invoke_value"))
    return (
        f"{mark.check} witness #{mark.number} — {mark.role}\n"
        f"#{op.get('index')} p{op.get('process')} {op.get('f')} {op.get('key', '')} {compact_json(value, 60)} ({op.get('type')})\n"
        f"invoked {seconds(start)} s, latency {latency}"
        + (f", offset {op.get('offset')}" if op.get("offset") is not None else "")
    )


# =========================================================================
# Latency
# =========================================================================


def _thin(points: list[tuple[float, float, Op]], forced: set[int]) -> tuple[list[tuple[float, float, Op]], float]:
    """Drop points that would land on an already drawn point of the same
    outcome (one per cell of ``cell`` px), growing the cell until at most
    MAX_POINTS_PER_PANEL remain. Forced (witness) operations always stay."""
    if len(points) <= MAX_POINTS_PER_PANEL:
        return points, 0.0
    kept: list[tuple[float, float, Op]] = []
    for cell in (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0):
        seen: set[tuple[str | None, int, int]] = set()
        kept = []
        for x, y, op in points:
            key = (op.outcome, int(x // cell), int(y // cell))
            if op.index in forced or key not in seen:
                seen.add(key)
                kept.append((x, y, op))
        if len(kept) <= MAX_POINTS_PER_PANEL:
            return kept, cell
    return kept, cell


def _latency_section(data: RunData, scale: TimeScale, witnesses: Sequence[CheckWitnesses]) -> str:
    types = data.op_types
    if not types:
        return "<section class=\"card\" id=\"latency\"><h2>Latency</h2><p class=\"muted\">no client operations</p></section>"
    latencies = [op.latency_ms for op in data.ops if op.latency_ms is not None]
    marks_by_f: dict[str, list[Mark]] = defaultdict(list)
    # A witness names the checker's f (read/write/cas); a metadata
    # operation is drawn in its own panel (create_topic...): find it by index.
    panel_of = {op.index: op.f for op in data.ops}
    for c in witnesses:
        for mark in c.marks:
            marks_by_f[panel_of.get(mark.op.get("index"), str(mark.op.get("f")))].append(mark)
            start, end = _mark_times(mark.op)
            if start is not None and end is not None:
                latencies.append((end - start) / 1e6)
    forced = {m.op.get("index") for ms in marks_by_f.values() for m in ms if isinstance(m.op.get("index"), int)}
    top = 22
    height = top + len(types) * (PANEL_H + PANEL_GAP) - PANEL_GAP + 8 + AXIS_H
    parts = [_svg_open("latency", height, "latency of each operation over time")]
    tooltips = _Tooltips()
    notes = []
    ops_by_f: dict[str, list[Op]] = defaultdict(list)
    for op in data.ops:
        ops_by_f[op.f].append(op)
    for position, f in enumerate(types):
        y0 = top + position * (PANEL_H + PANEL_GAP)
        y1 = y0 + PANEL_H
        ys = LogScale(latencies, y0 + 4, PANEL_H - 8)
        ops = ops_by_f[f]
        counts = Counter(op.outcome or "pending" for op in ops)
        points = [(scale.x(op.time_ns), ys.y(op.latency_ms), op) for op in ops if op.latency_ms is not None]
        kept, cell = _thin(points, forced)
        drawn = Counter(op.outcome for _, _, op in kept)
        parts.append(f"<g class=\"panel\" data-f=\"{esc(f)}\">")
        parts.append(f"<rect class=\"panel-bg\" x=\"{num(scale.left)}\" y=\"{num(y0)}\" width=\"{num(PLOT_W)}\" height=\"{PANEL_H}\"/>")
        parts.append(_fault_shades(data, scale, y0, y1, strong=False))
        for t in scale.ticks():
            x = scale.x(t * 1e9)
            parts.append(f"<line class=\"grid\" x1=\"{num(x)}\" x2=\"{num(x)}\" y1=\"{num(y0)}\" y2=\"{num(y1)}\"/>")
        for ms in ys.minor():
            parts.append(f"<line class=\"grid minor\" x1=\"{num(scale.left)}\" x2=\"{num(scale.right)}\" y1=\"{num(ys.y(ms))}\" y2=\"{num(ys.y(ms))}\"/>")
        for ms in ys.decades():
            y = ys.y(ms)
            parts.append(f"<line class=\"grid\" x1=\"{num(scale.left)}\" x2=\"{num(scale.right)}\" y1=\"{num(y)}\" y2=\"{num(y)}\"/>")
            parts.append(f"<text class=\"tick\" x=\"{num(scale.left - 6)}\" y=\"{num(y + 4)}\" text-anchor=\"end\">{ms_label(ms)}</text>")
        summary = f"{f}"
        detail = " · ".join(f"{counts[o]:,} {o}" for o in OUTCOMES if counts[o]) or "no completed operations"
        if counts["pending"]:
            detail += f" · {counts['pending']:,} never completed (not drawn)"
        if cell:
            detail += f" · thinned: {len(kept):,} of {len(points):,} points drawn"
            notes.append(
                f"{f}: {len(kept):,} of {len(points):,} points drawn (at most one per {cell:g} px cell per outcome; every witness operation kept)"
            )
        parts.append(
            f"<text class=\"panel-title\" x=\"{num(scale.left)}\" y=\"{num(y0 - 7)}\">{esc(summary)}"
            f"<tspan class=\"panel-detail\" dx=\"10\">{esc(detail)}</tspan></text>"
        )
        for outcome in ("ok", "info", "fail"):
            coords = [(x, y) for x, y, op in kept if op.outcome == outcome]
            if not coords:
                continue
            d = "".join(f"M{num(x)} {num(y)}h0" for x, y in coords)
            parts.append(f"<path class=\"pt pt-{outcome}\" d=\"{d}\"/>")
        for x, y, op in kept:
            tooltips.add(x, y, op)
        parts.append(_witness_markers(marks_by_f.get(f, []), scale, ys, y0))
        parts.append("</g>")
    axis_y = top + len(types) * (PANEL_H + PANEL_GAP) - PANEL_GAP + 8
    parts.append(_time_axis(scale, axis_y))
    parts.append("</svg>")
    legend = "".join(
        f"<label class=\"key toggle\"><input type=\"checkbox\" checked data-hide=\"{o}\"><i class=\"dot\" style=\"background:{OUTCOME_COLOURS[o]}\"></i>{o}</label>"
        for o in OUTCOMES
    )
    if forced:
        legend += (
            f"<label class=\"key toggle\"><input type=\"checkbox\" checked data-hide=\"wm\"><i class=\"ring\"></i>anomaly witness "
            f"(○ the operation the anomaly is about, □ the others it names)</label>"
        )
    legend += "<label class=\"key toggle\"><input type=\"checkbox\" checked data-hide=\"faults\"><i class=\"k-fault\"></i>fault window</label>"
    note = ""
    if notes:
        note = "<p class=\"note\">Downsampled to keep the file small: " + "; ".join(esc(n) for n in notes) + ".</p>"
    return f"""<section class="card" id="latency">
<h2>Latency</h2>
<p class="lede">Each dot is one operation: x when it was invoked, y how long it took to complete (log scale).
Operations that never completed are not drawn. Hover a dot for the operation.</p>
<div class="legend">{legend}</div>
{note}
<div class="scroll">{''.join(parts)}</div>
<script type="application/json" id="points">{tooltips.json()}</script>
</section>"""


class _Tooltips:
    """Hover details for the drawn points, compactly: one short row per
    point, with repeated strings (op type, key, error) interned."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}

    def intern(self, text: str) -> int:
        if text not in self._ids:
            self._ids[text] = len(self.strings)
            self.strings.append(text)
        return self._ids[text]

    def add(self, x: float, y: float, op: Op) -> None:
        value = op.value if op.outcome == "ok" or op.f != "read" else op.invoke_value
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        elif not (value is None or isinstance(value, (bool, int, float)) or (isinstance(value, list) and len(compact_json(value)) <= 40)):
            value = compact_json(value, 40)  # text to show as is
        error = op.extra.get("error")
        offset = op.extra.get("offset")
        self.rows.append([
            round(x, 1), round(y, 1), OUTCOMES.index(op.outcome) if op.outcome in OUTCOMES else 2,
            op.index, op.process if isinstance(op.process, int) else compact_json(op.process, 20),
            self.intern(op.f), self.intern(op.key[:30] if isinstance(op.key, str) else compact_json(op.key, 30)), value,
            round(op.latency_ms or 0.0, 2), round(op.time_ns / 1e6),
            self.intern(error[:120] if isinstance(error, str) else compact_json(error, 120)) if error is not None else -1,
            offset if isinstance(offset, int) and not isinstance(offset, bool) else -1,
        ])

    def json(self) -> str:
        return script_json({"strings": self.strings, "rows": self.rows})


def _witness_markers(marks: Sequence[Mark], scale: TimeScale, ys: LogScale, y0: float) -> str:
    parts = []
    drawn: list[tuple[Mark, float, float]] = []
    # The others first, so that the operations the anomalies are about are on top.
    for mark in sorted(marks, key=lambda m: m.primary):
        start, end = _mark_times(mark.op)
        if start is None:
            continue
        x = scale.x(start)
        if end is None:
            shape = f"<path class=\"wm-shape\" d=\"M{num(x - 5)} {num(y0 + 2)}h10l-5 8z\"/>"
            y = y0 + 6
        else:
            y = ys.y((end - start) / 1e6)
            if mark.primary:
                shape = f"<circle class=\"wm-shape primary\" cx=\"{num(x)}\" cy=\"{num(y)}\" r=\"6\"/>"
            else:
                shape = f"<rect class=\"wm-shape\" x=\"{num(x - 4.5)}\" y=\"{num(y - 4.5)}\" width=\"9\" height=\"9\"/>"
        drawn.append((mark, x, y))
        parts.append(f"<a class=\"wm\" href=\"#{esc(mark.anchor)}\">{shape}<title>{esc(_mark_tip(mark))}</title></a>")
    parts.extend(_witness_labels([(m, x, y) for m, x, y in drawn if m.primary], y0, y0 + PANEL_H))
    return "".join(parts)


# A witness label's line in the stack of labels near its mark.
WITNESS_LABEL_STEP = 15


def _witness_labels(marks: Sequence[tuple[Mark, float, float]], top: float, bottom: float) -> list[str]:
    """A label (``stale-read#3``) for each mark an anomaly is about, none
    overlapping another: each goes just above and right of its mark when
    that spot is free, else to the nearest free line above or below it
    (right of the mark, then left), joined to its mark by a thin leader
    line. Placed in order of time, then check and number, so the layout
    is the same for the same run. A mark with no free spot inside the
    panel keeps its ring and tooltip, without a label."""
    placed: list[tuple[float, float, float, float]] = []
    out = []
    lowest = top + 12  # baselines inside the panel
    highest = bottom - 4
    steps = int((highest - lowest) // WITNESS_LABEL_STEP) + 1
    for mark, x, y in sorted(marks, key=lambda item: (item[1], item[0].check, item[0].number)):
        text = f"{_abbrev(mark.check)}#{mark.number}"
        width = text_width_px(text)
        home = min(max(lowest, y - 8), highest)
        offsets = [0.0] + [sign * k * WITNESS_LABEL_STEP for k in range(1, steps + 1) for sign in (-1, 1)]
        for offset in offsets:
            baseline = home + offset
            if not lowest <= baseline <= highest:
                continue
            spot = next(
                (
                    (left, box)
                    for left in (x + 8, x - 8 - width)
                    if left >= 0 and left + width <= WIDTH
                    for box in [(left - 1, baseline - 11, left + width + 1, baseline + 4)]
                    if not any(overlaps(box, other) for other in placed)
                ),
                None,
            )
            if spot is None:
                continue
            left, box = spot
            placed.append(box)
            leader = ""
            if offset or left < x:
                end_x = left if left > x else left + width
                leader = f"<line class=\"wm-leader\" x1=\"{num(x)}\" y1=\"{num(y)}\" x2=\"{num(end_x)}\" y2=\"{num(baseline - 4)}\"/>"
            out.append(f"<a class=\"wm\" href=\"#{esc(mark.anchor)}\">{leader}{label_text(text, left, baseline, 'wm-label')}</a>")
            break
    return out


def _abbrev(check: str) -> str:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", check) if w]
    return check if len(check) <= 12 else "".join(w[0] for w in words) or check[:8]


# =========================================================================
# Throughput
# =========================================================================


def _throughput_section(data: RunData, scale: TimeScale) -> str:
    types = data.op_types
    if not types:
        return "<section class=\"card\" id=\"throughput\"><h2>Throughput</h2><p class=\"muted\">no client operations</p></section>"
    span_s = data.end_ns / 1e9
    bucket_s = 1.0 if span_s <= 600 else float(int(span_s / 600) + 1)
    bucket_ns = int(bucket_s * 1e9)
    buckets = int(data.end_ns // bucket_ns) + 1
    ok: dict[str, list[int]] = {f: [0] * buckets for f in types}
    not_ok = {outcome: [0] * buckets for outcome in ("fail", "info")}
    for op in data.ops:
        if op.complete_ns is None:
            continue
        b = min(buckets - 1, op.complete_ns // bucket_ns)
        if op.outcome == "ok":
            ok[op.f][b] += 1
        elif op.outcome in not_ok:
            not_ok[op.outcome][b] += 1
    totals = [sum(ok[f][b] for f in types) for b in range(buckets)]
    peak = max(max(totals, default=0), max(max(line, default=0) for line in not_ok.values()), 1) / bucket_s
    ticks = linear_ticks(0, peak, 4)
    y_max = max(ticks[-1], peak) if ticks else peak
    top, h = 24, THROUGHPUT_H
    bottom = top + h

    def y(rate: float) -> float:
        return bottom - rate / y_max * h

    colours = _op_colour(data)
    parts = [_svg_open("throughput", bottom + AXIS_H + 4, "throughput over time")]
    parts.append(f"<rect class=\"panel-bg\" x=\"{num(scale.left)}\" y=\"{top}\" width=\"{num(PLOT_W)}\" height=\"{h}\"/>")
    parts.append(_fault_shades(data, scale, top, bottom, strong=False))
    for tick in ticks:
        parts.append(f"<line class=\"grid\" x1=\"{num(scale.left)}\" x2=\"{num(scale.right)}\" y1=\"{num(y(tick))}\" y2=\"{num(y(tick))}\"/>")
        if tick:  # zero is the time axis, whose unit label sits there
            parts.append(f"<text class=\"tick\" x=\"{num(scale.left - 6)}\" y=\"{num(y(tick) + 4)}\" text-anchor=\"end\">{tick_label(tick)}</text>")
    parts.append(f"<text class=\"tick\" x=\"{num(scale.left - 6)}\" y=\"{num(top - 10)}\" text-anchor=\"end\">ops/s</text>")
    for f in types:
        paths = []
        for b in range(buckets):
            count = ok[f][b]
            if not count:
                continue
            below = sum(ok[g][b] for g in types[: types.index(f)])
            x0 = scale.x(b * bucket_ns)
            x1 = scale.x(min(data.end_ns, (b + 1) * bucket_ns))
            ya, yb = y((below + count) / bucket_s), y(below / bucket_s)
            paths.append(f"M{num(x0 + 0.5)} {num(yb)}V{num(ya)}H{num(max(x0 + 1, x1 - 0.5))}V{num(yb)}z")
        if paths:
            parts.append(f"<path class=\"bar\" fill=\"{colours[f]}\" d=\"{''.join(paths)}\"><title>ok {esc(f)}</title></path>")
    # Operations that failed, and those that were indeterminate, per second: a line each.
    for outcome, line in not_ok.items():
        if not any(line):
            continue
        pts = []
        for b in range(buckets):
            xm = scale.x(min(data.end_ns, (b + 0.5) * bucket_ns))
            pts.append(f"{'M' if not pts else 'L'}{num(xm)} {num(y(line[b] / bucket_s))}")
        parts.append(f"<path class=\"nonok nonok-{outcome}\" d=\"{''.join(pts)}\"><title>{outcome} ops/s</title></path>")
    # Hover: one invisible column per bucket with its numbers.
    for b in range(buckets):
        x0 = scale.x(b * bucket_ns)
        x1 = scale.x(min(data.end_ns, (b + 1) * bucket_ns))
        detail = ", ".join(f"{ok[f][b]} {f}" for f in types)
        fail_rate, info_rate = not_ok["fail"][b] / bucket_s, not_ok["info"][b] / bucket_s
        parts.append(
            f"<rect class=\"hover-col\" x=\"{num(x0)}\" y=\"{top}\" width=\"{num(max(1.0, x1 - x0))}\" height=\"{h}\">"
            f"<title>{esc(f'{b * bucket_s:g}–{(b + 1) * bucket_s:g} s: {totals[b] / bucket_s:g} ok ops/s ({detail}); {fail_rate:g} fail, {info_rate:g} info ops/s')}</title></rect>"
        )
    parts.append(_time_axis(scale, bottom))
    parts.append("</svg>")
    own = [f for f in types if colours[f] != OTHER_OP_COLOUR]
    legend = "".join(f"<span class=\"key\"><i style=\"background:{colours[f]}\"></i>ok {esc(f)}</span>" for f in own)
    if len(own) < len(types):  # past the palette's op colours: one colour, one entry
        legend += f"<span class=\"key\"><i style=\"background:{OTHER_OP_COLOUR}\"></i>ok, other op types</span>"
    legend += "".join(
        f"<span class=\"key\"><i class=\"line\" style=\"background:{OUTCOME_COLOURS[o]}\"></i>{o}</span>" for o in ("fail", "info")
    )
    legend += "<span class=\"key\"><i class=\"k-fault\"></i>fault window</span>"
    return f"""<section class="card" id="throughput">
<h2>Throughput</h2>
<p class="lede">Operations completed per second ({bucket_s:g} s buckets, by completion time): ok ones stacked by type, the ones that failed and the ones that were indeterminate as a line each.</p>
<div class="legend">{legend}</div>
<div class="scroll">{''.join(parts)}</div>
</section>"""


# =========================================================================
# Failed and indeterminate operations
# =========================================================================

# Reasons listed before the rest are summed in one row.
FAILURE_REASONS_MAX = 30


def _failures_section(data: RunData) -> str:
    """A table of the failed and indeterminate operations by reason (rows)
    and by node (columns): each cell counts fail, then info."""
    counts = failure_breakdown(data.ops)
    head = "<section class=\"card\" id=\"failures\"><h2>Failed and indeterminate operations</h2>"
    if not counts:
        return head + "<p class=\"muted\">none: every operation that completed was ok</p></section>"
    by_reason: dict[str, Counter] = defaultdict(Counter)
    for (reason, node, outcome), count in counts.items():
        by_reason[reason][(node, outcome)] += count
    reasons = sorted(by_reason, key=lambda r: (-sum(by_reason[r].values()), r))
    if len(reasons) > FAILURE_REASONS_MAX:
        rest = Counter()
        for reason in reasons[FAILURE_REASONS_MAX - 1 :]:
            rest.update(by_reason.pop(reason))
        reasons = reasons[: FAILURE_REASONS_MAX - 1] + ["(every other reason)"]
        by_reason["(every other reason)"] = rest
    recorded = sorted({node for (_, node, _) in counts if node != NO_NODE}, key=node_order)
    nodes = recorded + ([NO_NODE] if any(node == NO_NODE for (_, node, _) in counts) else [])

    def cell(tally: Counter, node: str | None) -> str:
        fail = sum(n for (where, outcome), n in tally.items() if outcome == "fail" and node in (None, where))
        info = sum(n for (where, outcome), n in tally.items() if outcome == "info" and node in (None, where))
        if not fail and not info:
            return "<td></td>"
        return (
            f"<td title=\"{fail:,} fail, {info:,} info\"><span class=\"c-fail\">{fail or '·'}</span>"
            f" / <span class=\"c-info\">{info or '·'}</span></td>"
        )

    def node_name(node: str) -> str:
        if node == NO_NODE:
            return "node not recorded"
        return f"broker {node}" if node in data.broker_nodes else f"node {node}"

    rows = "".join(
        f"<tr><th class=\"reason\">{esc(reason)}</th>{cell(by_reason[reason], None)}"
        + "".join(cell(by_reason[reason], node) for node in nodes) + "</tr>"
        for reason in reasons
    )
    total: Counter = Counter()
    for tally in by_reason.values():
        total.update(tally)
    foot = "<tr><th>every reason</th>" + cell(total, None) + "".join(cell(total, node) for node in nodes) + "</tr>"
    columns = "".join(f"<th>{esc(node_name(node))}</th>" for node in nodes)
    return f"""{head}
<p class="lede">Each cell counts the operations that <span class="c-fail">failed</span> (certainly did not happen) / were <span class="c-info">indeterminate</span> (may have happened).
A reason is the error code the history records (<code>NOT_LEADER</code>), else its error text with addresses written <code>ADDR</code> and numbers <code>N</code>; a node is the one the history names for the operation (that refused it or stopped answering).</p>
<div class="scroll"><table class="failures"><thead><tr><th>reason</th><th>all nodes</th>{columns}</tr></thead>
<tbody>{rows}</tbody><tfoot>{foot}</tfoot></table></div>
</section>"""


# =========================================================================
# Anomalies
# =========================================================================

OP_COLUMNS = (
    ("index", "index"), ("complete_index", "done index"), ("process", "process"), ("f", "f"), ("key", "key"),
    ("invoke_value", "invoke value"), ("value", "value"), ("type", "type"), ("time", "invoked (s)"),
    ("complete_time", "completed (s)"), ("_latency", "latency"), ("offset", "offset"), ("read_offset", "read offset"),
    ("mode", "mode"), ("node", "node"), ("error", "error"),
)


def _anomalies_section(data: RunData, witnesses: Sequence[CheckWitnesses]) -> str:
    checks = _checks(data.results)
    if data.results is None:
        body = "<p class=\"muted big\">Not checked: there is no <code>results.json</code> in the run directory. Run <code>jepsen-like check RUN_DIR --out RUN_DIR/results.json</code>, then write the report again.</p>"
        return f"<section class=\"card\" id=\"anomalies\"><h2>Anomalies</h2>{body}</section>"
    status_chips = "".join(
        f"<span class=\"chip chip-{esc(_status_css(check.get('status')))}\" title=\"{esc(check.get('reason') or CHECK_EXPLANATIONS.get(name, ''))}\">"
        f"{esc(name)} <b>{esc(check.get('status'))}</b></span>"
        for name, check in checks
    )
    blocks = []
    for c in witnesses:
        blocks.append(_check_block(c))
    if not blocks:
        blocks.append("<p class=\"ok-line\">No anomalies: every check that had something to look at passed.</p>")
    return f"""<section class="card" id="anomalies">
<h2>Anomalies</h2>
<div class="chips">{status_chips}</div>
{''.join(blocks)}
</section>"""


def _status_css(status: Any) -> str:
    return {"pass": "pass", "fail": "fail", "skipped": "skip", "unknown": "unknown"}.get(str(status), "skip")


def _check_block(c: CheckWitnesses) -> str:
    check = c.check
    witnesses = check.get("witnesses") if isinstance(check.get("witnesses"), list) else []
    count = check.get("count")
    shown = f"showing the first {len(witnesses)}" if isinstance(count, int) and count > len(witnesses) else ""
    explanation = CHECK_EXPLANATIONS.get(c.name, "")
    extras = {k: v for k, v in check.items() if k not in ("status", "count", "witnesses")}
    extra_html = ""
    if extras:
        extra_html = "<div class=\"check-extra\">" + "".join(
            f"<span class=\"opt\"><b>{esc(k)}</b> {esc(compact_json(v, 200))}</span>" for k, v in extras.items()
        ) + "</div>"
    items = [_witness_block(c, number, witness) for number, witness in enumerate(witnesses, start=1)]
    if not items:
        items.append("<p class=\"muted\">no witnesses listed</p>")
    return f"""<div class="check" id="check-{esc(c.slug)}">
<h3><span class="chip chip-{esc(_status_css(check.get('status')))}">{esc(check.get('status'))}</span> {esc(c.name)}
<span class="count{'' if check.get('status') == 'fail' else ' muted'}">{esc(count)} {'anomaly' if count == 1 else 'anomalies'}</span> <span class="muted">{esc(shown)}</span></h3>
{f'<p class="lede">{esc(explanation)}</p>' if explanation else ''}
{extra_html}
{''.join(items)}
</div>"""


def _witness_block(c: CheckWitnesses, number: int, witness: Any) -> str:
    anchor = f"w-{c.slug}-{number}"
    ops = witness_operations(witness)
    op_names = {name.split("[")[0] for name, _ in ops}
    scalars = []
    tables = []
    if isinstance(witness, Mapping):
        for name, value in witness.items():
            if name in op_names:
                continue
            if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
                tables.append(_generic_table(str(name), value))
            elif isinstance(value, Mapping):
                tables.append(_generic_table(str(name), [value]))
            else:
                shown = value if isinstance(value, str) else compact_json(value, 200)
                scalars.append(f"<span class=\"opt\"><b>{esc(name)}</b> {esc(shown)}</span>")
    if len(ops) >= 2:
        # How long before the operation the anomaly is about the others ended
        # (for a stale read: how old the write it missed was).
        (first_role, first), rest = ops[0], ops[1:]
        start, _ = _mark_times(first)
        for role, other in rest:
            _, other_end = _mark_times(other)
            if start is not None and other_end is not None and other_end <= start:
                scalars.append(
                    f"<span class=\"opt gap\">{esc(first_role)} invoked <b>{seconds(start - other_end)} s</b> after "
                    f"{esc(role)} completed</span>"
                )
    op_table = ""
    if ops:
        columns = [
            (field, label) for field, label in OP_COLUMNS
            if any((field in op) if field != "_latency" else ("complete_time" in op) for _, op in ops)
        ]
        known = {f for f, _ in OP_COLUMNS}
        rests = [{k: v for k, v in op.items() if k not in known} for _, op in ops]
        rows = []
        for position, ((role, op), rest) in enumerate(zip(ops, rests)):
            cells = [f"<th class=\"role-cell{' primary' if position == 0 else ''}\">{esc(role)}</th>"]
            for field, _ in columns:
                cells.append(f"<td>{_op_cell(op, field)}</td>")
            if any(rests):
                cells.append(f"<td class=\"rest\">{esc(compact_json(rest, 200)) if rest else ''}</td>")
            rows.append(f"<tr class=\"type-{esc(_status_css_op(op.get('type')))}\">{''.join(cells)}</tr>")
        head = "".join(f"<th>{esc(label)}</th>" for _, label in columns) + ("<th>other</th>" if any(rests) else "")
        op_table = (
            f"<div class=\"scroll\"><table class=\"witness-ops\"><thead><tr><th>as</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    exact = f"<details><summary>exact witness (results.json)</summary><pre>{esc(_pretty(witness))}</pre></details>"
    return f"""<div class="witness" id="{esc(anchor)}">
<div class="witness-head"><span class="witness-no">#{number}</span>{''.join(scalars)}</div>
{op_table}{''.join(tables)}{exact}
</div>"""


def _status_css_op(kind: Any) -> str:
    return str(kind) if kind in OUTCOMES else "none"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def _op_cell(op: Mapping[str, Any], field: str) -> str:
    if field == "_latency":
        start, end = _mark_times(op)
        return esc(latency_text((end - start) / 1e6)) if start is not None and end is not None else "–"
    if field not in op:
        return ""
    value = op[field]
    if field in ("time", "complete_time") and isinstance(value, int):
        return f"<span title=\"{esc(value)} ns\">{seconds(value, 6)}</span>"
    if field == "type":
        return f"<span class=\"c-{esc(_status_css_op(value))}\">{esc(value)}</span>"
    if isinstance(value, str) and field in ("f", "key", "mode", "error"):
        return esc(value)
    return esc(compact_json(value, 120))


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        name = f"{prefix}{key}"
        if isinstance(inner, Mapping):
            flat.update(_flatten(inner, name + "."))
        else:
            flat[name] = inner
    return flat


def _generic_table(name: str, rows: Iterable[Mapping[str, Any]]) -> str:
    flat_rows = [_flatten(row) for row in rows]
    columns: list[str] = []
    for row in flat_rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    head = "".join(f"<th>{esc(col)}</th>" for col in columns)
    body = "".join(
        "<tr>" + "".join(
            f"<td>{_generic_cell(col, row[col]) if col in row else ''}</td>" for col in columns
        ) + "</tr>"
        for row in flat_rows
    )
    return (
        f"<div class=\"scroll\"><table class=\"witness-ops generic\"><caption>{esc(name)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _generic_cell(column: str, value: Any) -> str:
    if column.split(".")[-1] in ("time", "complete_time") and isinstance(value, int) and not isinstance(value, bool):
        return f"<span title=\"{esc(value)} ns\">{seconds(value, 6)} s</span>"
    if isinstance(value, str):
        return esc(value)
    return esc(compact_json(value, 120))


# =========================================================================
# Footer
# =========================================================================


def _prometheus_html(prometheus: Mapping[str, Any]) -> str:
    """The key queries of a run scraped by Prometheus (``--prometheus``),
    linked to its graph page, and the command that serves the run's data
    again once the run (and its Prometheus) ended."""
    queries = prometheus.get("queries")
    if not isinstance(queries, list) or not queries:
        return ""
    rows = "".join(
        f"<tr><th>{esc(query.get('name', ''))}</th><td><a href=\"{esc(query.get('link', ''))}\"><code>{esc(query.get('promql', ''))}</code></a></td></tr>"
        for query in queries
        if isinstance(query, Mapping)
    )
    return (
        f"<h3>Prometheus</h3><p>Scraped by <code>{esc(prometheus.get('url', ''))}</code> during the run. "
        f"To look again: <code>{esc(prometheus.get('serve_again', ''))}</code></p><table class=\"files\">{rows}</table>"
    )


def _footer(data: RunData, out: Path | None) -> str:
    rows = []
    for name in ("history.jsonl", "node-events.jsonl", "results.json", "meta.json", "options.json", "log-dumps.jsonl", "logs"):
        path = data.files.get(name)
        if path is None:
            rows.append(f"<tr><th>{esc(name)}</th><td class=\"muted\">missing</td><td></td></tr>")
            continue
        try:
            size = f"{path.stat().st_size:,} bytes" if path.is_file() else f"{sum(1 for _ in path.iterdir())} files"
        except OSError:
            size = ""
        rows.append(f"<tr><th>{esc(name)}</th><td><code>{esc(path.resolve())}</code></td><td>{esc(size)}</td></tr>")
    stats = (data.results or {}).get("stats")
    stats_html = ""
    if isinstance(stats, Mapping) and stats:
        stats_html = "<details><summary>checker stats</summary><div class=\"check-extra\">" + "".join(
            f"<span class=\"opt\"><b>{esc(k)}</b> {esc(compact_json(v, 80))}</span>" for k, v in stats.items()
        ) + "</div></details>"
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    where = f" as <code>{esc(out.resolve())}</code>" if out is not None else ""
    return f"""<footer class="card" id="files">
<h2>Files</h2>
<p>Run directory <code>{esc(data.run_dir.resolve())}</code></p>
<table class="files">{''.join(rows)}</table>
{_prometheus_html(data.prometheus)}
{stats_html}
<p class="muted">Written {now}{where} by <code>python -m jepsen_like.report</code>. Times are seconds since the run began (the runner's clock).</p>
</footer>"""


# =========================================================================
# CSS and JS
# =========================================================================

CSS = Template("""
*{box-sizing:border-box}
body{margin:0;background:#eef2f7;color:#0f172a;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1380px;margin:0 auto;padding:16px}
.card{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(15,23,42,.12);padding:16px 20px;margin-bottom:16px}
h1{margin:0;font-size:28px;letter-spacing:-.01em}
h2{margin:0 0 4px;font-size:19px}
h3{margin:18px 0 4px;font-size:16px;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
code,pre{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:12px}
pre{background:#f8fafc;border:1px solid #e2e8f0;border-radius:6px;padding:8px;overflow:auto;max-height:360px}
.muted{color:#64748b}.big{font-size:16px}
.lede{margin:2px 0 8px;color:#475569;font-size:13px}
.note{margin:4px 0;color:#92400e;background:#fffbeb;border:1px solid #fde68a;border-radius:6px;padding:4px 8px;font-size:12px}
.kicker{text-transform:uppercase;font-size:11px;letter-spacing:.08em;color:#64748b}
.run-id{color:#475569;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.head-row{display:flex;justify-content:space-between;gap:24px;align-items:flex-start;flex-wrap:wrap}
.verdict{text-align:right;max-width:60%}
.verdict-word{font-size:44px;font-weight:800;line-height:1;letter-spacing:.02em}
.verdict-line{color:#475569;margin-top:4px}
header.card{border-top:8px solid #94a3b8}
.verdict-valid{border-top-color:#16a34a!important}.verdict-valid .verdict-word{color:#16a34a}
.verdict-invalid{border-top-color:#dc2626!important}.verdict-invalid .verdict-word{color:#dc2626}
.verdict-unknown{border-top-color:#d97706!important}.verdict-unknown .verdict-word{color:#d97706}
.verdict-none .verdict-word{color:#64748b}
.facts{display:flex;gap:10px;flex-wrap:wrap;margin:14px 0 10px}
.fact{background:#f8fafc;border:1px solid #e2e8f0;border-radius:8px;padding:6px 14px;min-width:92px}
.fact-v{font-size:20px;font-weight:700}.fact-k{font-size:11px;color:#64748b;text-transform:uppercase;letter-spacing:.05em}
.head-cols{display:grid;grid-template-columns:minmax(380px,auto) 1fr;gap:20px;align-items:start}
.opts{display:grid;grid-template-columns:auto 1fr;gap:4px 12px;font-size:12px}
.opts-title{color:#64748b;text-transform:uppercase;font-size:11px;letter-spacing:.05em;padding-top:3px}
.opt{display:inline-block;background:#f1f5f9;border-radius:4px;padding:1px 6px;margin:0 4px 4px 0;font-size:12px}
.opt b{color:#475569;font-weight:600}
.opt.gap{background:#fdf4ff;color:#86198f}.opt.gap b{color:#86198f}
table{border-collapse:collapse;font-size:12px}
th,td{padding:3px 8px;border-bottom:1px solid #e2e8f0;text-align:left;vertical-align:top}
thead th{background:#f8fafc;color:#475569;font-weight:600;white-space:nowrap}
table.ops td{text-align:right;font-variant-numeric:tabular-nums}
table.failures td{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.failures th.reason{font-weight:400;font-family:ui-monospace,"DejaVu Sans Mono",monospace;max-width:520px}
table.failures tfoot th,table.failures tfoot td{border-top:2px solid #cbd5e1;font-weight:600}
.c-ok{color:#1d4ed8}.c-fail{color:#b91c1c}.c-info{color:#b45309}
nav{display:flex;gap:14px;margin-top:10px;font-size:13px}
nav a,a{color:#1d4ed8;text-decoration:none}nav a:hover{text-decoration:underline}
.warnings{background:#fff7ed;border:1px solid #fed7aa;border-radius:6px;padding:6px 24px;color:#9a3412}
.chips{display:flex;flex-wrap:wrap;gap:6px;margin:6px 0}
.verdict .chips{justify-content:flex-end}
.chip{display:inline-block;border-radius:999px;padding:1px 10px;font-size:12px;border:1px solid transparent;white-space:nowrap}
.chip-pass{background:#dcfce7;color:#166534}.chip-fail{background:#fee2e2;color:#991b1b;border-color:#fca5a5;font-weight:600}
.chip-skip{background:#f1f5f9;color:#64748b}.chip-unknown{background:#fef3c7;color:#92400e;border-color:#fcd34d}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:4px 0 8px;font-size:12px;color:#334155}
.key{display:inline-flex;align-items:center;gap:5px}
.key i{display:inline-block;width:14px;height:10px;border-radius:2px}
.key i.dot{width:9px;height:9px;border-radius:50%}
.key i.line{height:2px}
.key i.ring{width:11px;height:11px;border-radius:50%;border:2px solid $witness;background:#fff}
.key i.k-fault{background:$fault_shade;border-left:1px dashed $fault;border-right:1px dashed $fault}
.key i.k-net{background:repeating-linear-gradient(-45deg,$fault 0 2px,#fff 2px 4px)}
.key i.k-hostile{background:radial-gradient(circle,$hostile 1.6px,#fff7ed 1.7px) 0 0/6px 6px}
.key i.k-disk{background:repeating-linear-gradient(90deg,$disk 0 4px,#f5f3ff 4px 6px)}
.key i.k-voters{background:repeating-linear-gradient(0deg,$voters_pale 0 2px,$voters 2px 4px)}
.key i.k-non-voter{background:repeating-linear-gradient(-45deg,$voters 0 2px,#fff 2px 5px);opacity:.7}
.key i.k-down{background:repeating-linear-gradient(45deg,$down 0 3px,#94a3b8 3px 6px)}
.key i.k-two{background:$two_leaders;border:1px solid #a21caf}
.key i.k-heal{height:0;border-top:2px dashed $heal;background:none}
.toggle{cursor:pointer;user-select:none}.toggle input{margin:0}
.scroll{overflow-x:auto}
svg.chart{display:block;width:100%;height:auto;min-width:900px;font-family:system-ui,"DejaVu Sans",sans-serif}
.axis{stroke:#64748b;stroke-width:1}
.grid{stroke:#e2e8f0;stroke-width:1}.grid.minor{stroke:#f1f5f9}
.tick{font-size:11px;fill:#64748b}
.lane-bg{fill:#f8fafc;stroke:#e2e8f0}
.lane-label{font-size:13px;font-weight:700;fill:#0f172a}
.lane-sub{font-size:10.5px;fill:#64748b}
.lane-empty{font-size:11px;fill:#94a3b8;font-style:italic}
.role-leader rect{stroke:#0b1b4d;stroke-width:1}
.role-text{font-size:11px;pointer-events:none}
.role-leader .role-text{font-weight:700}
.target-text{font-size:11px;fill:#fff;font-weight:600;pointer-events:none}
.fault-shade{fill:$fault;fill-opacity:.05}.fault-shade.strong{fill-opacity:.09}
.fault-edge{stroke:$fault;stroke-opacity:.55;stroke-dasharray:3 3}
.instant{stroke:$heal;stroke-width:1.5;stroke-dasharray:5 3}
.fault-label rect{fill:#fecdd3;stroke:$fault;stroke-width:.8}
.fault-label text{font-size:11px;fill:#9f1239;font-weight:600}
.instant-label text{font-size:11px;fill:$heal;font-weight:600}
.two-leaders rect{fill:$two_leaders;stroke:#a21caf;stroke-width:.8}.two-leaders-text{font-size:11px;fill:#701a75;font-weight:700;pointer-events:none}
.panel-bg{fill:#fcfdfe;stroke:#e2e8f0}
.panel-title{font-size:14px;font-weight:700;fill:#0f172a}
.panel-detail{font-size:11.5px;font-weight:400;fill:#64748b}
.pt{fill:none;stroke-linecap:round;stroke-width:3.4}
.pt-ok{stroke:$ok;stroke-opacity:.45}
.pt-fail{stroke:$fail;stroke-opacity:.8}
.pt-info{stroke:$info;stroke-opacity:.9;stroke-width:4.2}
.wm-shape{fill:none;stroke:$witness;stroke-width:2}
.wm-shape.primary{stroke-width:2.6;fill:$witness_shade}
.wm-label{font-size:11px;font-weight:700;fill:#a21caf;paint-order:stroke;stroke:#fff;stroke-width:3px}
.wm-bar{fill:$witness}
.wm-diamond{fill:$witness;stroke:#fff;stroke-width:1.5}
.wm:hover .wm-shape{stroke-width:3.5}
.bar{shape-rendering:crispEdges}
.nonok{fill:none;stroke-width:1.6}.nonok-fail{stroke:$fail}.nonok-info{stroke:$info;stroke-dasharray:4 2}
.wm-leader{stroke:$witness;stroke-width:1;stroke-opacity:.7}
.hover-col{fill:transparent}.hover-col:hover{fill:rgba(15,23,42,.06)}
.hide-ok .pt-ok,.hide-fail .pt-fail,.hide-info .pt-info,.hide-wm .wm,.hide-faults .fault-shade{display:none}
.check{border-top:1px solid #e2e8f0;margin-top:8px}
.count{color:#991b1b;font-weight:700}.count.muted{color:#64748b}
.check-extra{margin:4px 0}
.witness{border-left:3px solid $witness;padding:4px 0 4px 12px;margin:10px 0;background:linear-gradient(90deg,#fdf4ff,transparent 40%)}
.witness:target{background:#fae8ff}
.witness-head{margin-bottom:4px}
.witness-no{font-weight:800;color:#a21caf;margin-right:8px;font-size:14px}
.witness-ops td{font-family:ui-monospace,"DejaVu Sans Mono",monospace;white-space:nowrap}
.witness-ops td.rest{white-space:normal;color:#64748b}
.witness-ops caption{text-align:left;font-weight:600;color:#475569;padding:4px 0}
.role-cell{color:#475569;white-space:nowrap}.role-cell.primary{color:#a21caf}
details{margin:4px 0}summary{cursor:pointer;color:#475569;font-size:12px}
.ok-line{color:#166534;font-size:15px;font-weight:600}
table.files td,table.files th{border:none;padding:1px 10px 1px 0}
#tip{position:absolute;z-index:10;pointer-events:none;background:#0f172a;color:#f8fafc;font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace;padding:6px 8px;border-radius:6px;white-space:pre;box-shadow:0 2px 8px rgba(0,0,0,.25)}
@media print{body{background:#fff}.card{box-shadow:none}}
""").substitute(
    ok=OUTCOME_COLOURS["ok"], fail=OUTCOME_COLOURS["fail"], info=OUTCOME_COLOURS["info"],
    fault=FAULT, fault_shade=rgba(FAULT, 0.13), down=DOWN, hostile=HOSTILE, disk=DISK,
    witness=WITNESS, witness_shade=rgba(WITNESS, 0.12), two_leaders=TWO_LEADERS, heal=HEAL,
    voters=VOTERS, voters_pale=VOTERS_PALE,
)  # fmt: skip

JS = r"""
(function(){
  var names=['ok','fail','info'];
  document.querySelectorAll('input[data-hide]').forEach(function(box){
    box.addEventListener('change',function(){document.body.classList.toggle('hide-'+box.dataset.hide,!box.checked);});
  });
  var el=document.getElementById('points'), tip=document.getElementById('tip');
  if(!el||!tip)return;
  var data;try{data=JSON.parse(el.textContent);}catch(e){return;}
  var rows=data.rows,str=data.strings;
  var svg=document.querySelector('svg.latency');if(!svg)return;
  function ms(v){return v<1?(v*1000).toFixed(0)+' µs':v<100?v.toFixed(1)+' ms':v<1000?v.toFixed(0)+' ms':(v/1000).toFixed(2)+' s';}
  svg.addEventListener('mouseleave',function(){tip.hidden=true;});
  svg.addEventListener('mousemove',function(ev){
    if(ev.target.closest&&ev.target.closest('.wm')){tip.hidden=true;return;}
    var m=svg.getScreenCTM();if(!m){return;}
    var p=svg.createSVGPoint();p.x=ev.clientX;p.y=ev.clientY;p=p.matrixTransform(m.inverse());
    var best=null,bd=49,cl=document.body.classList;
    var hidden=[cl.contains('hide-ok'),cl.contains('hide-fail'),cl.contains('hide-info')];
    for(var i=0;i<rows.length;i++){
      var r=rows[i];if(hidden[r[2]])continue;
      var dx=r[0]-p.x,dy=r[1]-p.y,d=dx*dx+dy*dy;if(d<bd){bd=d;best=r;}
    }
    if(!best){tip.hidden=true;return;}
    var v=best[7];v=(typeof v==='string')?v:JSON.stringify(v);
    var lines=['#'+best[3]+'  '+names[best[2]]+'  '+str[best[5]]+' '+str[best[6]]+' '+v,
      'process '+best[4]+'   invoked '+(best[9]/1000).toFixed(3)+' s   latency '+ms(best[8])];
    if(best[11]>=0)lines.push('offset '+best[11]);
    if(best[10]>=0)lines.push('error '+str[best[10]]);
    tip.textContent=lines.join('\n');tip.hidden=false;
    tip.style.left=(ev.pageX+14)+'px';tip.style.top=(ev.pageY+12)+'px';
  });
})();
"""
