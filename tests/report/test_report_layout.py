"""report.html laid out by a real browser (issue 19, "The report"): a run
crowded with faults, heals and stale reads close together renders in
headless Chromium with no two labels of a chart overlapping, and every
legend colour stands for one thing only."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from headless_chromium import PageSession

from jepsen_like.report import write_report

from _crowded_run import build_crowded_run

# Every text element of every chart, with its box as the browser laid it
# out; and every legend entry with its swatch's colours as computed.
MEASURE = r"""
(function(){
  var texts=[];
  document.querySelectorAll('svg.chart').forEach(function(svg,chart){
    svg.querySelectorAll('text').forEach(function(el){
      if(!el.textContent.trim())return;
      var r=el.getBoundingClientRect();
      if(r.width<=0||r.height<=0)return;
      var g=el.closest('g');
      texts.push({chart:chart,svg:svg.getAttribute('class'),text:el.textContent,
        cls:(el.getAttribute('class')||'')+'/'+(g?g.getAttribute('class')||'':''),
        l:r.left,r:r.right,t:r.top,b:r.bottom});
    });
  });
  var keys=[];
  document.querySelectorAll('.legend .key').forEach(function(key){
    var swatch=key.querySelector('i');if(!swatch)return;
    var s=getComputedStyle(swatch);
    var border=parseFloat(s.borderTopWidth)>0?s.borderTopColor:'';
    keys.push({label:key.textContent.trim(),
      colour:s.backgroundColor+' | '+s.backgroundImage+' | '+border});
  });
  return JSON.stringify({texts:texts,keys:keys});
})()
"""


@pytest.fixture(scope="module")
def crowded_report(tmp_path_factory):
    run_dir = build_crowded_run(tmp_path_factory.mktemp("crowded"))
    return write_report(run_dir)


@pytest.fixture(scope="module")
def measured(crowded_report, tmp_path_factory):
    with PageSession(tmp_path_factory.mktemp("chromium"), width=1400, height=1000) as page:
        page.navigate(crowded_report.resolve().as_uri())
        page.wait_for("document.readyState === 'complete' && document.querySelector('svg.latency') !== null")
        found = json.loads(page.evaluate(MEASURE))
        assert not [line for line in page.console if line.startswith("Uncaught")]
    return found


def _overlap(a: dict, b: dict) -> float:
    """The area two boxes share (px²)."""
    width = min(a["r"], b["r"]) - max(a["l"], b["l"])
    height = min(a["b"], b["b"]) - max(a["t"], b["t"])
    return width * height if width > 0.5 and height > 0.5 else 0.0


def test_no_two_labels_of_a_chart_overlap(measured):
    texts = measured["texts"]
    by_chart = defaultdict(list)
    for box in texts:
        by_chart[box["chart"]].append(box)
    clashes = [
        f"{a['svg']}: {a['text']!r} ({a['cls']}) and {b['text']!r} ({b['cls']})"
        for boxes in by_chart.values()
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if _overlap(a, b)
    ]
    assert not clashes, "overlapping labels:\n" + "\n".join(clashes[:20])
    # The crowded parts are there: every fault and heal is named, and most
    # of the stale reads are labelled (not only the first of a cluster).
    names = [box["text"] for box in texts]
    assert sum("fault-label" in box["cls"] for box in texts) == 14
    assert sum("instant-label" in box["cls"] for box in texts) == 2
    assert sum(name.startswith("stale-read#") for name in names) >= 6


def test_every_legend_colour_means_one_thing(measured):
    keys = measured["keys"]
    meanings = defaultdict(set)
    for key in keys:
        meanings[key["colour"]].add(key["label"])
    # Ten op types, six roles, four broker states, three outcomes at least.
    assert len(keys) >= 23
    reused = {colour: sorted(labels) for colour, labels in meanings.items() if len(labels) > 1}
    assert not reused, f"one colour for several things: {reused}"
