"""The report's staleness section: a table per grouping and a plot, from the
``staleness`` figures the checker writes into results.json (the reference
checker's, on the synthetic zombie-leader run)."""

from __future__ import annotations

import json
import re

from jepsen_like.checker import check_reference, write_results
from jepsen_like.report import write_report

from _report_run import build_run
from test_report import Page


def _section(text: str) -> str:
    start = text.index('<section class="card" id="staleness">')
    return text[start:text.index("</section>", start)]


def test_the_staleness_section_tables_and_plots_the_checkers_figures(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8.0, rate=60.0)
    [checked] = check_reference([str(run_dir)])
    write_results([checked], run_dir / "results.json")
    figures = json.loads((run_dir / "results.json").read_text())["staleness"]
    # The run's leader-local reads from a zombie: many beyond the 3 s bound.
    [mode] = figures["by_mode"]
    assert mode["mode"] == "leader-local" and figures["bounds_ms"] == {"leader-local": 3000.0}
    assert 0 < mode["beyond_bound"] <= mode["missed_writes"] <= mode["reads"] == figures["reads"]
    assert mode["beyond_bound"] == checked.checks["stale-read"]["count"]

    section = _section(write_report(run_dir).read_text(encoding="utf-8"))
    page = Page(section)
    tables = page.with_class("staleness", "table")
    assert len(tables) == 3
    rows = re.findall(r"<tr><td class=\"name\">.*?</tr>", section)
    assert len(rows) == len(figures["by_mode"]) + len(figures["by_node"]) + len(figures["by_window"])
    first = rows[0]
    assert f"<td>{mode['reads']}</td><td>{mode['missed_writes']}</td><td class=\"st-beyond\">{mode['beyond_bound']}</td>" in first
    assert f"<td>{mode['max_ms'] / 1000:.4g} s</td>" in first and f"#{mode['worst_read']}" in first
    # One plot row per node group and per window group, each with the bound.
    assert len(page.with_class("st-row", "g")) == len(figures["by_node"]) + len(figures["by_window"])
    assert len(page.with_class("st-bound", "line")) == len(figures["by_node"]) + len(figures["by_window"])
    assert len(page.with_class("beyond", "rect")) == sum(1 for g in figures["by_node"] + figures["by_window"] if g["beyond_bound"])


def test_results_without_staleness_figures_say_so(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8.0, rate=60.0)  # results.json written by hand, as before issue 19
    section = _section(write_report(run_dir).read_text(encoding="utf-8"))
    assert "results.json has no staleness figures" in section and "<svg" not in section
