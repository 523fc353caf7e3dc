"""The report's staleness section: how far behind the reads were, from the
``staleness`` figures of results.json (docs/checker.md, "Staleness").

A table per grouping (read mode; mode and node; fault window and mode) and
one plot: a row per (mode, node) and per (fault window, mode) group, its
median, p99 and worst staleness on a log axis of milliseconds, with the
mode's bound drawn across the row. A read beyond its bound is a stale-read
anomaly (listed in the anomalies section); within it, it is only counted.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ._palette import BEYOND_BOUND, STALENESS, STALENESS_BOUND, rgba
from ._svg import esc, ms_label, num

WIDTH = 1320
LABEL_W = 300
RIGHT = 24
ROW_H = 22
TOP = 26
AXIS_H = 24
# Zero (a read that missed nothing) is drawn at the axis's left edge.
_FLOOR_MS = 0.1

# Colours: the palette's (``_palette.py``), one per meaning; the bars are tints.
STALENESS_CSS = f"""
.st-bar{{fill:{rgba(STALENESS, 0.3)}}}.st-bar.beyond{{fill:{rgba(BEYOND_BOUND, 0.3)}}}
.st-p99{{stroke:{STALENESS};stroke-width:2}}
.st-p50{{fill:{STALENESS}}}
.st-bound{{stroke:{STALENESS_BOUND};stroke-width:2;stroke-dasharray:4 2}}
.st-label{{font-size:11.5px;fill:#0f172a}}
.st-beyond{{color:{BEYOND_BOUND};font-weight:700}}
table.staleness td{{text-align:right;font-variant-numeric:tabular-nums}}
table.staleness td.name{{text-align:left}}
table.staleness caption{{text-align:left;padding:8px 0 2px}}
"""


def staleness_section(results: Mapping[str, Any] | None) -> str:
    """The staleness card (``id="staleness"``) for a run's results."""
    figures = results.get("staleness") if isinstance(results, Mapping) else None
    if not isinstance(figures, Mapping) or not figures.get("reads"):
        why = "no ok reads were measured" if isinstance(figures, Mapping) else "results.json has no staleness figures"
        return f"<section class=\"card\" id=\"staleness\"><h2>Staleness</h2><p class=\"muted\">{esc(why)}</p></section>"
    bounds = figures.get("bounds_ms") or {}
    bound_text = ", ".join(f"{esc(mode)} {_ms_text(bound)}" for mode, bound in bounds.items())
    parts = [
        "<section class=\"card\" id=\"staleness\"><h2>Staleness</h2>",
        f"<p class=\"lede\">How far behind each of the {esc(figures['reads'])} ok reads was: its invoke minus the "
        "acknowledgement of the first write it missed (0 if none). Bounds: " + bound_text + ". A read beyond its "
        "mode's bound is a stale-read anomaly; within it, it is only counted.</p>",
        _plot(figures),
        _table("By read mode", figures.get("by_mode") or [], ("mode",)),
        _table("By node", figures.get("by_node") or [], ("mode", "node")),
        _table("By fault window", figures.get("by_window") or [], ("window", "mode")),
        "</section>",
    ]
    return "\n".join(parts)


def _ms_text(ms: Any) -> str:
    """A staleness, four significant digits (the exact figure is in results.json)."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "–"
    if ms == 0:
        return "0"
    return esc(f"{ms / 1000:.4g} s" if ms >= 1000 else f"{ms:.4g} ms")


def _table(caption: str, groups: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    head = "".join(f"<th>{esc(name)}</th>" for name in names) + "".join(
        f"<th>{esc(title)}</th>" for title in (
            "reads", "missed a write", "beyond bound", "p50", "p90", "p99", "max", "max offsets behind", "worst read",
        )
    )
    rows = []
    for group in groups:
        if not isinstance(group, Mapping):
            continue
        beyond = group.get("beyond_bound") or 0
        worst = group.get("worst_read")
        beyond_class = " class=\"st-beyond\"" if beyond else ""
        cells = "".join(f"<td class=\"name\">{esc(_name(group.get(name)))}</td>" for name in names)
        cells += (
            f"<td>{esc(group.get('reads'))}</td><td>{esc(group.get('missed_writes'))}</td>"
            f"<td{beyond_class}>{esc(beyond)}</td>"
            + "".join(f"<td>{_ms_text(group.get(field))}</td>" for field in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
            + f"<td>{esc(_name(group.get('max_offsets_behind'), '–'))}</td>"
            + f"<td>{'–' if worst is None else '#' + esc(worst)}"
            + ("" if group.get("worst_missed_write") is None else f" <span class=\"muted\">missed #{esc(group['worst_missed_write'])}</span>")
            + "</td>"
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f"<div class=\"scroll\"><table class=\"staleness\"><caption class=\"muted\">{esc(caption)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _name(value: Any, none: str = "none") -> str:
    return none if value is None else str(value)


def _plot(figures: Mapping[str, Any]) -> str:
    bounds = figures.get("bounds_ms") or {}
    rows: list[tuple[str, Mapping[str, Any]]] = []
    for group in figures.get("by_node") or []:
        if isinstance(group, Mapping):
            rows.append((f"{group.get('mode')} · node {_name(group.get('node'))}", group))
    for group in figures.get("by_window") or []:
        if isinstance(group, Mapping):
            rows.append((f"{group.get('window')} · {group.get('mode')}", group))
    values = [_number(group.get("max_ms")) for _, group in rows] + [_number(bound) for bound in bounds.values()]
    hi_exp = max(0, math.ceil(math.log10(max([v for v in values if v > 0] or [1.0]) * 1.01)))
    lo_exp = math.floor(math.log10(_FLOOR_MS))
    plot_w = WIDTH - LABEL_W - RIGHT

    def x(ms: float) -> float:
        share = (math.log10(max(ms, _FLOOR_MS)) - lo_exp) / (hi_exp - lo_exp)
        return LABEL_W + min(max(share, 0.0), 1.0) * plot_w

    height = TOP + len(rows) * ROW_H + AXIS_H
    bottom = TOP + len(rows) * ROW_H
    parts = [
        f"<div class=\"scroll\"><svg class=\"chart staleness-plot\" viewBox=\"0 0 {WIDTH} {num(height)}\" role=\"img\" "
        f"aria-label=\"staleness per node and fault window\">",
        f"<text class=\"panel-title\" x=\"{LABEL_W}\" y=\"16\">staleness (ms, log): bar to the worst read, "
        "dot at the median, tick at p99, dashed: the mode's bound (a pink bar: reads beyond it)</text>",
    ]
    for exponent in range(lo_exp, hi_exp + 1):
        gx = x(10.0 ** exponent)
        parts.append(f"<line class=\"grid\" x1=\"{num(gx)}\" x2=\"{num(gx)}\" y1=\"{TOP}\" y2=\"{num(bottom)}\"/>")
        label = "≤0.1 ms" if exponent == lo_exp else ms_label(10.0 ** exponent)
        parts.append(f"<text class=\"tick\" x=\"{num(gx)}\" y=\"{num(bottom + 15)}\" text-anchor=\"middle\">{esc(label)}</text>")
    for position, (label, group) in enumerate(rows):
        top = TOP + position * ROW_H
        middle = top + ROW_H / 2
        worst, p50, p99 = (_number(group.get(name)) for name in ("max_ms", "p50_ms", "p99_ms"))
        beyond = bool(group.get("beyond_bound"))
        tip = (
            f"{label}: {group.get('reads')} reads, {group.get('missed_writes')} missed a write, "
            f"{group.get('beyond_bound')} beyond the bound; p50 {p50:g} ms, p99 {p99:g} ms, max {worst:g} ms"
        )
        parts.append(f"<g class=\"st-row\"><title>{esc(tip)}</title>")
        parts.append(f"<text class=\"st-label\" x=\"{LABEL_W - 8}\" y=\"{num(middle + 4)}\" text-anchor=\"end\">{esc(label)}</text>")
        parts.append(
            f"<rect class=\"st-bar{' beyond' if beyond else ''}\" x=\"{LABEL_W}\" y=\"{num(top + 4)}\" "
            f"width=\"{num(max(1.0, x(worst) - LABEL_W))}\" height=\"{num(ROW_H - 8)}\"/>"
        )
        parts.append(f"<line class=\"st-p99\" x1=\"{num(x(p99))}\" x2=\"{num(x(p99))}\" y1=\"{num(top + 3)}\" y2=\"{num(top + ROW_H - 3)}\"/>")
        parts.append(f"<circle class=\"st-p50\" cx=\"{num(x(p50))}\" cy=\"{num(middle)}\" r=\"3\"/>")
        bound = bounds.get(group.get("mode"))
        if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound > 0:
            parts.append(f"<line class=\"st-bound\" x1=\"{num(x(bound))}\" x2=\"{num(x(bound))}\" y1=\"{num(top + 1)}\" y2=\"{num(top + ROW_H - 1)}\"/>")
        parts.append("</g>")
    parts.append(f"<line class=\"axis\" x1=\"{LABEL_W}\" x2=\"{WIDTH - RIGHT}\" y1=\"{num(bottom)}\" y2=\"{num(bottom)}\"/>")
    parts.append("</svg></div>")
    return "".join(parts)


def _number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0
