"""The report's memory section: a campaign's ``memory.csv`` (written every
10 s while the workload runs; ``jepsen_like.campaign._memory``) as a chart
of the harness's and the node processes' resident memory over the run,
and a table of where each started, peaked and ended.

A long run is judged by this card (issue 20: a 2-hour campaign within
bounded memory): a flat line after the first minutes is bounded; a line
that keeps rising with the operations is not, whatever its peak.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ._palette import MEMORY_HARNESS, MEMORY_NODES
from ._svg import esc, linear_ticks, num, tick_label

MEMORY_CSS = f"""
.mem-harness{{fill:none;stroke:{MEMORY_HARNESS};stroke-width:1.8}}
.mem-nodes{{fill:none;stroke:{MEMORY_NODES};stroke-width:1.8}}
table.memory td{{text-align:right;font-variant-numeric:tabular-nums}}
table.memory td.name{{text-align:left}}
table.memory caption{{text-align:left;padding:8px 0 2px}}
"""

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class MemorySample:
    elapsed_s: float
    operations: int
    harness_rss_bytes: int
    nodes_rss_bytes: int


def read_memory(path: Path) -> tuple[list[MemorySample], str | None]:
    """The rows of ``memory.csv``, and a warning when some were unreadable
    (a run killed mid-write leaves a torn last line; it is skipped)."""
    samples: list[MemorySample] = []
    skipped = 0
    try:
        with open(path, newline="") as file:
            for row in csv.DictReader(file):
                try:
                    samples.append(
                        MemorySample(
                            float(row["elapsed_s"]), int(row["operations"]), int(row["harness_rss_bytes"]), int(row["nodes_rss_bytes"])
                        )
                    )
                except (KeyError, TypeError, ValueError):
                    skipped += 1
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return [], f"memory.csv unreadable: {error}"
    return samples, (f"memory.csv: {skipped} unreadable row(s) skipped" if skipped else None)


def memory_section(run_dir: Path, left: float, plot_w: float, width: float) -> str:
    """The memory card (``id="memory"``), or a one-line card saying why there
    is none (runs recorded before memory.csv existed have none)."""
    path = Path(run_dir) / "memory.csv"
    if not path.exists():
        return "<section class=\"card\" id=\"memory\"><h2>Memory</h2><p class=\"muted\">no memory.csv in this run</p></section>"
    samples, warning = read_memory(path)
    if len(samples) < 2:
        why = warning or "fewer than two samples in memory.csv"
        return f"<section class=\"card\" id=\"memory\"><h2>Memory</h2><p class=\"muted\">{esc(why)}</p></section>"
    lede = (
        "Resident memory while the workload ran, sampled every "
        f"{samples[1].elapsed_s - samples[0].elapsed_s:g} s: the harness (this process: clients, nemesis, history recorder) "
        "and the node processes summed (a killed node drops out until it restarts)."
    )
    if warning:
        lede += f" <span class=\"muted\">{esc(warning)}</span>"
    legend = (
        f"<span class=\"key\"><i class=\"line\" style=\"background:{MEMORY_HARNESS}\"></i>harness RSS</span>"
        f"<span class=\"key\"><i class=\"line\" style=\"background:{MEMORY_NODES}\"></i>nodes' RSS, summed</span>"
    )
    return (
        f"<section class=\"card\" id=\"memory\">\n<h2>Memory</h2>\n<p class=\"lede\">{lede}</p>\n"
        f"<div class=\"legend\">{legend}</div>\n<div class=\"scroll\">{_chart(samples, left, plot_w, width)}</div>\n"
        f"{_table(samples)}\n</section>"
    )


def _chart(samples: list[MemorySample], left: float, plot_w: float, width: float) -> str:
    top, height, axis_h = 24, 150, 30
    bottom = top + height
    end_s = max(samples[-1].elapsed_s, 1.0)
    peak_mib = max(max(s.harness_rss_bytes, s.nodes_rss_bytes) for s in samples) / _MIB
    y_ticks = linear_ticks(0, peak_mib, 4)
    y_max = max(y_ticks[-1] if y_ticks else 0.0, peak_mib, 1.0)

    def x(elapsed_s: float) -> float:
        return left + elapsed_s / end_s * plot_w

    def y(mib: float) -> float:
        return bottom - mib / y_max * height

    parts = [
        f"<svg class=\"chart memory\" viewBox=\"0 0 {num(width)} {num(bottom + axis_h)}\" role=\"img\" aria-label=\"memory over the run\">",
        f"<rect class=\"panel-bg\" x=\"{num(left)}\" y=\"{top}\" width=\"{num(plot_w)}\" height=\"{height}\"/>",
        f"<text class=\"tick\" x=\"{num(left - 6)}\" y=\"{num(top - 10)}\" text-anchor=\"end\">MiB</text>",
    ]
    for tick in y_ticks:
        parts.append(f"<line class=\"grid\" x1=\"{num(left)}\" x2=\"{num(left + plot_w)}\" y1=\"{num(y(tick))}\" y2=\"{num(y(tick))}\"/>")
        if tick:  # zero is the time axis, whose first label sits there
            parts.append(f"<text class=\"tick\" x=\"{num(left - 6)}\" y=\"{num(y(tick) + 4)}\" text-anchor=\"end\">{tick_label(tick)}</text>")
    for tick in linear_ticks(0, end_s, 8):
        # The first tick carries the unit: seconds since the workload started.
        label = f"{tick_label(tick)} s" if tick == 0 else tick_label(tick)
        parts.append(f"<text class=\"tick\" x=\"{num(x(tick))}\" y=\"{num(bottom + 16)}\" text-anchor=\"middle\">{label}</text>")
    for css, field in (("mem-harness", "harness_rss_bytes"), ("mem-nodes", "nodes_rss_bytes")):
        points = "".join(f"{'M' if i == 0 else 'L'}{num(x(s.elapsed_s))} {num(y(getattr(s, field) / _MIB))}" for i, s in enumerate(samples))
        parts.append(f"<path class=\"{css}\" d=\"{points}\"/>")
    parts.append("</svg>")
    return "".join(parts)


def _table(samples: list[MemorySample]) -> str:
    """Start, peak and end of each line, and the growth from the end of the
    first quarter to the end (per operation, so a slower run compares)."""
    quarter = samples[len(samples) // 4]
    last = samples[-1]
    rows = []
    for name, field in (("harness", "harness_rss_bytes"), ("nodes, summed", "nodes_rss_bytes")):
        values = [getattr(s, field) for s in samples]
        operations = last.operations - quarter.operations
        growth = getattr(last, field) - getattr(quarter, field)
        per_op = f"{growth / operations:.0f} B" if operations > 0 else "–"
        rows.append(
            f"<tr><td class=\"name\">{esc(name)}</td><td>{values[0] / _MIB:.0f}</td><td>{max(values) / _MIB:.0f}</td>"
            f"<td>{values[-1] / _MIB:.0f}</td><td>{growth / _MIB:+.0f}</td><td>{per_op}</td></tr>"
        )
    head = "".join(
        f"<th>{esc(title)}</th>"
        for title in ("process", "start MiB", "peak MiB", "end MiB", "end − first quarter MiB", "per operation since then")
    )
    return (
        f"<div class=\"scroll\"><table class=\"memory\"><caption class=\"muted\">{len(samples)} samples, "
        f"{last.operations} operations in {last.elapsed_s:.0f} s</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
