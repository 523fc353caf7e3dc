"""The report's parts that need no browser (issue 19, "The report"): the
palette, the two-leaders periods, the label layout's arithmetic, the
reasons failed operations are counted by, and the sections they make."""

from __future__ import annotations

import html
import itertools
import re

import pytest

from jepsen_like.report import concurrent_leaders, load_run, render_report, write_report
from jepsen_like.report._load import NO_ERROR, NO_NODE, Op, describe_fault, failure_breakdown, failure_reason
from jepsen_like.report._palette import MIN_DISTANCE, OP_COLOURS, OTHER_OP_COLOUR, distance, meanings, op_colours
from jepsen_like.report._staleness import STALENESS_CSS
from jepsen_like.report._svg import overlaps, text_width_px

from _crowded_run import build_crowded_run
from _report_run import build_run



@pytest.fixture(scope="module")
def crowded_page(tmp_path_factory) -> str:
    return render_report(load_run(build_crowded_run(tmp_path_factory.mktemp("crowded"))))


@pytest.fixture(scope="module")
def zombie_page(tmp_path_factory) -> str:
    return write_report(build_run(tmp_path_factory.mktemp("zombie"), duration_s=20)).read_text(encoding="utf-8")


# =========================================================================
# Palette
# =========================================================================


def test_no_two_meanings_share_a_colour_or_come_close():
    colours = meanings()
    close = [
        (a, b, round(distance(ca, cb)))
        for (a, ca), (b, cb) in itertools.combinations(sorted(colours.items()), 2)
        if distance(ca, cb) < MIN_DISTANCE
    ]
    assert not close, close


def test_op_types_past_the_palette_share_the_one_other_colour():
    types = [f"op{n}" for n in range(len(OP_COLOURS) + 3)]
    colours = op_colours(types)
    assert len(set(colours[f] for f in types[: len(OP_COLOURS)])) == len(OP_COLOURS)
    assert {colours[f] for f in types[len(OP_COLOURS) :]} == {OTHER_OP_COLOUR}


def test_the_staleness_plot_draws_in_the_palette_s_colours():
    """Its marks' colours (bars as tints of theirs) are meanings of the
    palette, so the distinctness test above covers them."""
    palette = set(meanings().values())
    for rule in ("st-bar", "st-bar.beyond", "st-p99", "st-p50", "st-bound", "st-beyond"):
        [body] = re.findall(r"\.%s\{([^}]*)\}" % re.escape(rule), STALENESS_CSS)
        colours = re.findall(r"#[0-9a-f]{6}", body) + [
            "#%02x%02x%02x" % tuple(int(part) for part in rgb.split(",")) for rgb in re.findall(r"rgba\((\d+,\d+,\d+),", body)
        ]
        assert colours and set(colours) <= palette, (rule, colours)


def test_a_colour_not_written_rrggbb_is_refused():
    with pytest.raises(ValueError, match="#rrggbb"):
        distance("red", "#000000")


# =========================================================================
# Two leaders at once
# =========================================================================


def test_two_leaders_are_the_overlap_of_their_spans():
    spans = [("3", 10, 50, 1), ("1", 30, 90, 2)]
    assert concurrent_leaders(spans) == [(30, 50, [("1", 2), ("3", 1)])]


def test_a_hand_over_at_one_instant_is_not_two_leaders():
    assert concurrent_leaders([(1, 0, 10, 1), (2, 10, 20, 2), (3, 20, 20, 3)]) == []


def test_a_third_leader_splits_the_period_and_nodes_sort_by_number():
    spans = [("10", 0, 100, 1), ("2", 20, 80, 2), ("9", 40, 60, 3)]
    assert concurrent_leaders(spans) == [
        (20, 40, [("2", 2), ("10", 1)]),
        (40, 60, [("2", 2), ("9", 3), ("10", 1)]),
        (60, 80, [("2", 2), ("10", 1)]),
    ]


def test_touching_periods_with_the_same_leaders_merge():
    # Node 1 leads in two spans that touch (a role event that changed
    # nothing else), node 2 all along: one period.
    spans = [(1, 0, 50, 4), (1, 50, 100, 4), (2, 0, 100, 5)]
    assert concurrent_leaders(spans) == [(0, 100, [(1, 4), (2, 5)])]


def test_the_campaign_report_draws_the_zombie_leaders_band(zombie_page):
    page = zombie_page
    bands = re.findall(r'<g class="two-leaders">.*?<title>([^<]*)</title></g>', page)
    # Node 3 leads epoch 1 from 1.8 s and, cut off, believes it until 12.1 s;
    # node 1 leads epoch 2 from 7.05 s (tests/report/_report_run.py).
    assert [html.unescape(b) for b in bands] == [
        "2 leaders at once, 7.050 s – 12.100 s (5.0 s): n1 e2 + n3 e1"
    ]
    assert "two leaders at once</span>" in page  # in the legend


def test_a_kill_ends_a_leaders_belief(crowded_page):
    """Node 3, killed at 5.35 s while it still led epoch 1, stops counting
    as a leader there: the band runs from node 1's election to the kill."""
    page = crowded_page
    bands = [html.unescape(b) for b in re.findall(r'<g class="two-leaders">.*?<title>([^<]*)</title></g>', page)]
    assert bands == ["2 leaders at once, 4.000 s – 5.350 s (1.4 s): n1 e2 + n3 e1"]


def test_a_run_without_two_leaders_says_so(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8)
    events = (run_dir / "node-events.jsonl").read_text().splitlines()
    (run_dir / "node-events.jsonl").write_text("\n".join(e for e in events if '"leader", "epoch": 1' not in e) + "\n")
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert 'class="two-leaders"' not in page and "never two at once" in page


# =========================================================================
# Label widths and boxes
# =========================================================================


def test_labels_are_drawn_at_the_width_the_layout_planned(crowded_page):
    """Every label a layout placed carries its planned width as its
    ``textLength`` (bold, or regular for most role names), so the browser
    draws it exactly that wide whatever the font."""
    page = crowded_page
    drawn = re.findall(r'<text[^>]*textLength="([\d.]+)"[^>]*>([^<]*)</text>', page)
    assert len(drawn) > 30
    for length, text in drawn:
        planned = {round(text_width_px(html.unescape(text), bold=bold), 1) for bold in (True, False)}
        assert float(length) in planned, (text, length, planned)


def test_wider_letters_make_wider_labels_and_boxes_apart_do_not_overlap():
    assert text_width_px("mmmm") > text_width_px("iiii") * 3
    assert text_width_px("kill n2", bold=True) > text_width_px("kill n2", bold=False)
    assert overlaps((0, 0, 10, 10), (9, 9, 20, 20))
    assert not overlaps((0, 0, 10, 10), (10, 0, 20, 10))
    assert overlaps((0, 0, 10, 10), (11, 0, 20, 10), gap=2)


# =========================================================================
# Failed and indeterminate operations
# =========================================================================


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("127.0.0.1:40001 refused the request: NOT_LEADER: node 2 follows 1", "NOT_LEADER"),
        ("indeterminate: NoAnswerError: no answer from 127.0.0.1:40003 within 1.0 s", "NoAnswerError: no answer from ADDR within N s"),
        ("no node served the request within 5 s: localhost:9093 is not the leader", "no node served the request within N s: ADDR is not the leader"),
        ("connect: [Errno 111] Connection refused", "connect: [Errno N] Connection refused"),
        ("precondition failed", "precondition failed"),
        (None, NO_ERROR),
        ({"code": 7}, '{"code": N}'),
        ("x" * 200, "x" * 79 + "…"),
    ],
)
def test_a_failure_is_counted_by_its_error_code_or_its_text_without_addresses_and_numbers(error, reason):
    assert failure_reason(error) == reason


def test_the_breakdown_counts_fail_and_info_by_reason_node_and_outcome():
    def op(index: int, outcome: str | None, **extra: object) -> Op:
        return Op(index=index, process=index, f="write", key="k", invoke_value=1, time_ns=0, outcome=outcome, extra=dict(extra))

    ops = [
        op(1, "fail", error="a:1 refused: NOT_LEADER", node="2"),
        op(2, "fail", error="b:2 refused: NOT_LEADER", node="2"),
        op(3, "info", error="indeterminate: timed out after 5 s"),
        op(4, "ok", node="1"),
        op(5, None),
    ]
    assert failure_breakdown(ops) == {("NOT_LEADER", "2", "fail"): 2, ("timed out after N s", NO_NODE, "info"): 1}


def test_the_report_tables_failures_by_reason_and_node(crowded_page):
    page = crowded_page
    section = page[page.index('id="failures"') : page.index('id="anomalies"')]
    head = re.findall(r"<th>([^<]*)</th>", section[section.index("<thead>") : section.index("</thead>")])
    assert head == ["reason", "all nodes", "node 1", "node 2", "node 3", "broker 101", "node not recorded"]
    rows = {
        html.unescape(reason): [re.sub(r"<[^>]+>", "", cell) for cell in cells]
        for reason, cells in (
            (m.group(1), re.findall(r"<td[^>]*>(.*?)</td>", m.group(2)))
            for m in re.finditer(r'<tr><th class="reason">([^<]*)</th>(.*?)</tr>', section)
        )
    }
    # tests/report/_crowded_run.py: every ninth operation fails, taking the
    # failures in turn; NOT_LEADER came from node 2, the timeouts from node 3.
    assert rows["NOT_LEADER"] == ["33 / ·", "", "33 / ·", "", "", ""]
    assert rows["NoAnswerError: no answer from ADDR within N s"] == ["· / 33", "", "", "· / 33", "", ""]
    assert rows["connection lost"] == ["· / 33", "", "", "", "", "· / 33"]
    assert rows["connect: [Errno N] Connection refused"] == ["33 / ·", "", "", "", "33 / ·", ""]
    assert 'href="#failures"' in page


def test_a_run_with_no_failures_says_so(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8)
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    kept = [line for line in lines if '"type": "fail"' not in line and '"type": "info"' not in line or '"nemesis"' in line]
    (run_dir / "history.jsonl").write_text("\n".join(kept) + "\n")
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "none: every operation that completed was ok" in page


def test_the_memory_card_charts_memory_csv_and_tables_its_growth(tmp_path):
    from jepsen_like.report._memory import memory_section

    assert "no memory.csv" in memory_section(tmp_path, 100, 1000, 1200)
    rows = ["elapsed_s,operations,harness_rss_bytes,python_blocks,nodes_rss_bytes"]
    rows += [f"{10 * i}.0,{1000 * i},{(100 + 2 * i) * 2**20},1,{300 * 2**20}" for i in range(9)]
    (tmp_path / "memory.csv").write_text("\n".join(rows) + "\n10.0,torn")
    card = memory_section(tmp_path, 100, 1000, 1200)
    assert card.count("<path class=\"mem-") == 2
    # Harness: 100 → 116 MiB; from the first quarter's row (i=2: 104 MiB,
    # 2,000 operations) to the end (116 MiB, 8,000): +12 MiB, 2,097 B per operation.
    assert "<td class=\"name\">harness</td><td>100</td><td>116</td><td>116</td><td>+12</td><td>2097 B</td>" in card
    assert "<td class=\"name\">nodes, summed</td><td>300</td><td>300</td><td>300</td><td>+0</td><td>0 B</td>" in card
    assert "1 unreadable row(s) skipped" in card


def test_a_hostile_window_by_the_attacker_with_a_certificate_is_labelled_so():
    """--tls runs each hostile-clients window twice, without and with a
    certificate, at the same node: the labels tell the two apart."""
    assert describe_fault("hostile-garbage", {"node": 3, "kind": "garbage", "authenticated": True}) == "hostile-garbage n3 (cert)"
    assert describe_fault("hostile-garbage", {"node": 3, "kind": "garbage", "authenticated": False}) == "hostile-garbage n3"
    assert describe_fault("hostile-garbage", {"node": 3, "kind": "garbage"}) == "hostile-garbage n3"
