"""report.html: its structure (always) and how it renders in headless
Chromium (when Debian's ``chromium`` is installed; otherwise those tests
skip and say so, and the structure checks stand alone)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from headless_chromium import chromium, console_errors

from jepsen_like.report import load_run, write_report
from jepsen_like.report.__main__ import main as report_main

from _report_png import decode
from _report_run import HOSTILE, build_run



class Page(HTMLParser):
    """Every start tag with its attributes, the text, and what is inside
    ``<script>`` elements (which html.parser hands over as raw data)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self.text: list[str] = []
        self._script: dict[str, str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append((tag, attributes))
        if tag == "script":
            self._script = attributes
            self.scripts.append((attributes, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            attributes, text = self.scripts[-1]
            self.scripts[-1] = (attributes, text + data)
        else:
            self.text.append(data)

    def with_class(self, name: str, tag: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if name in a.get("class", "").split() and (tag is None or t == tag)]

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if "id" in a}

    def all_text(self) -> str:
        return "".join(self.text)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = build_run(tmp_path_factory.mktemp("run"))
    return run_dir, write_report(run_dir)


def witnesses(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "results.json").read_text())["checks"]["stale-read"]["witnesses"]


def test_the_report_is_one_file_next_to_the_run_with_every_section(run):
    run_dir, out = run
    assert out == run_dir / "report.html" and out.is_file()
    page = Page(out.read_text(encoding="utf-8"))
    assert {"summary", "timeline", "latency", "throughput", "anomalies", "files"} <= page.ids()
    text = page.all_text()
    assert "INVALID" in text and "zombie-leader" in text
    assert "isolate-leader n3" in text and "kill n2" in text and "heal" in text


def test_it_opens_offline_nothing_is_fetched(run):
    _, out = run
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    for tag, attributes in page.tags:
        assert "src" not in attributes, (tag, attributes)
        assert not attributes.get("href", "#").startswith(("http", "//")), (tag, attributes)
        assert tag not in ("link", "iframe", "img", "object", "embed"), tag
    assert "@import" not in text and "url(http" not in text
    assert "fetch(" not in text and "XMLHttpRequest" not in text


def test_the_timeline_has_one_lane_per_node_with_roles_epochs_and_fault_windows(run):
    run_dir, out = run
    page = Page(out.read_text(encoding="utf-8"))
    lanes = page.with_class("lane", "g")
    assert [lane["data-node"] for lane in lanes] == ["1", "2", "3"] == load_run(run_dir).nodes
    roles = page.with_class("role", "g")
    assert {r["data-role"] for r in roles} >= {"leader", "follower", "unattached"}
    assert len(page.with_class("role-leader")) == 2  # node 3 in epoch 1, node 1 in epoch 2
    text = page.all_text()
    assert "leader e1" in text and "leader e2" in text and "follower e2 →n1" in text
    # Two fault windows shaded across the lanes, one heal line, one killed node.
    assert len(page.with_class("fault-shade", "rect")) >= 2
    assert "killed" in text


def test_latency_has_a_panel_per_op_type_and_marks_every_witness_operation(run):
    run_dir, out = run
    page = Page(out.read_text(encoding="utf-8"))
    assert [p["data-f"] for p in page.with_class("panel", "g")] == ["read", "write", "cas"]
    assert page.with_class("pt-ok", "path") and page.with_class("pt-fail", "path") and page.with_class("pt-info", "path")
    hrefs = [a["href"] for a in page.with_class("wm", "a")]
    assert "#w-stale-read-1" in hrefs and "#w-stale-read-2" in hrefs
    # Each witness links to its block, which lists the exact operations.
    assert {"w-stale-read-1", "w-stale-read-2", "check-stale-read"} <= page.ids()
    text = page.all_text()
    for witness in witnesses(run_dir):
        for op in (witness["read"], witness["missed_write"]):
            assert str(op["index"]) in text and str(op["complete_index"]) in text
            assert f"{op['time'] / 1e9:.6f}" in text and f"{op['complete_time'] / 1e9:.6f}" in text
    assert "5 anomalies" in text and "showing the first 2" in text
    assert "missed_write" in text and "bound_ms" in text


def test_the_hover_data_is_json_and_holds_the_witness_operations(run):
    run_dir, out = run
    page = Page(out.read_text(encoding="utf-8"))
    [(_, points)] = [(a, t) for a, t in page.scripts if a.get("type") == "application/json"]
    data = json.loads(points)
    indexes = {row[3] for row in data["rows"]}
    for witness in witnesses(run_dir):
        assert witness["read"]["index"] in indexes and witness["missed_write"]["index"] in indexes


def test_strings_from_the_data_are_escaped(run):
    _, out = run
    raw = out.read_text(encoding="utf-8")
    assert HOSTILE not in raw
    assert "alert(" in raw  # it is there, harmless
    page = Page(raw)
    # Exactly our two scripts: the points JSON and the page's own JS.
    assert [a.get("type") for a, _ in page.scripts] == ["application/json", None]
    [(_, points)] = [(a, t) for a, t in page.scripts if a.get("type") == "application/json"]
    assert "<" not in points and "&" not in points
    assert HOSTILE in json.loads(points)["strings"]  # a cas's error, intact once parsed
    # The option shows as text; the witness values and the fault's note as JSON text.
    text = page.all_text()
    assert HOSTILE in text
    assert text.count(json.dumps(HOSTILE, separators=(",", ":"))) >= 3


def test_without_results_the_run_is_not_checked(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8, with_results=False)
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    text = page.all_text()
    assert "NOT CHECKED" in text and "Not checked" in text
    assert not page.with_class("wm")
    assert len(page.with_class("lane", "g")) == 3


def test_damaged_inputs_are_said_not_raised(tmp_path):
    run_dir = build_run(tmp_path, duration_s=8)
    with open(run_dir / "history.jsonl", "a", encoding="utf-8") as history:
        history.write('{"index": 99999, "time": 12, "proc')  # a run cut off mid-line
    (run_dir / "results.json").write_text("{not json")
    (run_dir / "node-events.jsonl").unlink()
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    text = page.all_text()
    assert "history.jsonl: 1 unreadable line(s) skipped" in text
    assert "results.json: unreadable" in text and "NOT CHECKED" in text
    assert len(page.with_class("lane", "g")) == 3  # from options.json's controllers
    assert "no role events from this node" in text


def test_a_long_busy_run_is_thinned_but_keeps_every_witness(tmp_path):
    run_dir = build_run(tmp_path, duration_s=62, rate=700)
    ops = sum(1 for line in open(run_dir / "history.jsonl") if '"invoke"' in line)
    assert ops > 15_000
    out = write_report(run_dir)
    assert out.stat().st_size < 1_500_000
    page = Page(out.read_text(encoding="utf-8"))
    assert "Downsampled" in page.all_text()
    [(_, points)] = [(a, t) for a, t in page.scripts if a.get("type") == "application/json"]
    rows = json.loads(points)["rows"]
    assert len(rows) < ops
    indexes = {row[3] for row in rows}
    for witness in witnesses(run_dir):
        assert witness["read"]["index"] in indexes and witness["missed_write"]["index"] in indexes
    assert "#w-stale-read-1" in [a["href"] for a in page.with_class("wm", "a")]


def test_the_module_entry_point_writes_where_told(tmp_path, capsys):
    run_dir = build_run(tmp_path, duration_s=6)
    out = tmp_path / "elsewhere" / "r.html"
    assert report_main([str(run_dir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.is_file() and not (run_dir / "report.html").exists()


# =========================================================================
# Headless Chromium
# =========================================================================


def near(pixel: tuple[int, int, int], colour: str, tolerance: int = 12) -> bool:
    rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb))


def test_chromium_renders_the_report(run, tmp_path):
    _, out = run
    png = tmp_path / "report.png"
    done = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,2000", out.resolve().as_uri())
    assert png.is_file(), done.stderr[-2000:]
    assert not console_errors(done.stderr)
    image = decode(png.read_bytes())
    assert (image.width, image.height) == (1400, 2000)
    pixels = [image.pixel(x, y) for y in range(0, image.height, 7) for x in range(0, image.width, 7)]
    assert len(set(pixels)) > 50, "the screenshot is (nearly) one colour"
    # The verdict in red at the top, leader bands of the timeline below it,
    # ok dots of the latency chart further down.
    top = [p for p in pixels[: len(pixels) // 8]]
    assert any(near(p, "#dc2626") for p in top), "no red verdict"
    assert any(near(p, "#1e3a8a") for p in pixels), "no leader band"
    assert sum(1 for p in pixels if p[2] > 150 and p[0] < 200 and p[2] - p[0] > 60) > 50, "no blue ok dots"


def test_chromium_runs_the_hover_script(run, tmp_path):
    """Hover the first drawn point: the tooltip shows that operation."""
    _, out = run
    driver = tmp_path / "hover.html"
    probe = (
        "<script>(function(){var d=JSON.parse(document.getElementById('points').textContent),r=d.rows[0];"
        "var svg=document.querySelector('svg.latency'),p=svg.createSVGPoint();p.x=r[0];p.y=r[1];"
        "p=p.matrixTransform(svg.getScreenCTM());"
        "svg.dispatchEvent(new MouseEvent('mousemove',{clientX:p.x,clientY:p.y,bubbles:true}));"
        "var tip=document.getElementById('tip');"
        "document.body.setAttribute('data-probe',(tip.hidden?'hidden':'shown')+'|'+r[3]+'|'+tip.textContent);})();</script>"
    )
    driver.write_text(out.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = chromium(tmp_path, "--window-size=1400,2000", "--dump-dom", driver.resolve().as_uri())
    assert not console_errors(done.stderr)
    match = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert match, done.stderr[-2000:]
    state, index, tip = html.unescape(match.group(1)).split("|", 2)
    assert state == "shown"
    assert tip.startswith(f"#{index} ") and "latency" in tip


def test_witnesses_of_other_shapes_are_tabled_and_marked(tmp_path):
    """Split-brain claims (node events: marked on their lanes), forked-log
    records and a linearizability witness all render from results.json."""
    run_dir = build_run(tmp_path, duration_s=8)
    results = json.loads((run_dir / "results.json").read_text())
    read = results["checks"]["stale-read"]["witnesses"][0]["read"]
    claim = {"kind": "role", "role": "leader", "epoch": 2}
    results["checks"] = {
        "split-brain": {"status": "fail", "count": 1, "witnesses": [{"epoch": 2, "claims": [
            {"leader": "1", "event": dict(claim, node="1", time=3_000_000_000, leader="1")},
            {"leader": "3", "event": dict(claim, node="3", time=3_500_000_000, leader="3")},
        ]}]},
        "forked-log": {"status": "fail", "count": 1, "witnesses": [{"offset": 7, "records": [
            {"node": "1", "offset": 7, "epoch": 1, "record_hash": "aaaa", "hwm": 9},
            {"node": "3", "offset": 7, "epoch": 2, "record_hash": "bbbb", "hwm": 9},
        ]}]},
        "linearizability": {"status": "fail", "count": 1, "witnesses": [{"key": "r0", "ops": 40, "op": read, "minimal": True}],
                            "keys": {"total": 2, "linearizable": 1, "not-linearizable": 1, "unknown": 0}},
        "lost-write": {"status": "unknown", "count": 0, "witnesses": []},
    }
    (run_dir / "results.json").write_text(json.dumps(results))
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    assert {"check-split-brain", "check-forked-log", "check-linearizability", "check-lost-write"} <= page.ids()
    assert len(page.with_class("wm-diamond", "path")) == 2
    assert "#w-linearizability-1" in [a["href"] for a in page.with_class("wm", "a")]
    text = page.all_text()
    assert "claims" in text and "event.node" in text and "records" in text and "bbbb" in text
    assert str(read["index"]) in text and "minimal" in text
    assert "no witnesses listed" in text  # the unknown check


# =========================================================================
# Brokers and metadata operations (campaigns with kraft-broker processes)
# =========================================================================


def add_brokers(run_dir: Path) -> None:
    """Two brokers in the options; broker 101 goes online, is fenced during
    a cut, comes back; broker 102 reports nothing. Metadata operations as
    the campaign's workload records them: the register model's f with the
    operation's name in ``op`` (a broker read in mode ``broker``)."""
    options = json.loads((run_dir / "options.json").read_text())
    (run_dir / "options.json").write_text(json.dumps(dict(options, brokers=2)))
    s = 1_000_000_000
    states = [(1.0, "fenced", 3), (1.5, "online", 3), (6.0, "fenced", 3), (9.0, "online", 3), (15.2, "stopping", 3),
              (15.4, "offline", 3), (16.0, "fenced", 120), (16.6, "online", 120)]
    with open(run_dir / "node-events.jsonl", "a", encoding="utf-8") as out:
        for time_s, state, epoch in states:
            out.write(json.dumps({"time": int(time_s * s), "node": "101", "kind": "broker_state", "broker_id": "101",
                                  "state": state, "broker_epoch": epoch}) + "\n")
    cut = {"fault_id": 9, "shape": "isolate-from", "node": 101, "group": [1, 2, 3], "how": "drop"}
    history = run_dir / "history.jsonl"
    events = [json.loads(line) for line in history.read_text().splitlines()]
    index = max(e["index"] for e in events) + 1
    extra = [
        {"process": "nemesis", "type": "info", "f": "broker-cut-both-ways", "key": None, "time": int(5.5 * s), "value": {"phase": "start", "fault": cut}},
        {"process": "nemesis", "type": "info", "f": "broker-cut-both-ways", "key": None, "time": int(8.5 * s), "value": {"phase": "end", "fault": cut}},
    ]
    descriptor = {"partitions": 2, "replication_factor": 1}
    for n in range(40):
        t = int((2 + n * 0.3) * s)
        extra += [
            {"process": 100, "type": "invoke", "f": "cas", "key": f"topic/t{n}", "value": [None, descriptor], "op": "create_topic", "time": t},
            {"process": 100, "type": "ok", "f": "cas", "key": f"topic/t{n}", "value": [None, descriptor], "op": "create_topic", "time": t + 9_000_000},
            {"process": 101, "type": "invoke", "f": "read", "key": f"topic/t{n}", "value": None, "op": "describe_topic",
             "mode": "broker", "node": "101", "time": t + 20_000_000},
            {"process": 101, "type": "ok" if n % 5 else "fail", "f": "read", "key": f"topic/t{n}", "value": descriptor if n % 5 else None,
             "op": "describe_topic", "mode": "broker", "node": "101", "offset": 100 + n, "time": t + 23_000_000},
        ]
    for event in extra:
        event["index"] = index
        index += 1
    history.write_text("".join(json.dumps(e) + "\n" for e in events + extra))


def test_brokers_get_lanes_with_their_states_and_metadata_operations_their_panels(tmp_path):
    run_dir = build_run(tmp_path, duration_s=20)
    add_brokers(run_dir)
    data = load_run(run_dir)
    assert data.nodes == ["1", "2", "3", "101", "102"] and data.broker_nodes == {"101", "102"}
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    assert [lane["data-node"] for lane in page.with_class("lane", "g")] == ["1", "2", "3", "101", "102"]
    bands = page.with_class("broker-state", "g")
    assert [b["data-role"] for b in bands] == ["fenced", "online", "fenced", "online", "stopping", "offline", "fenced", "online"]
    text = page.all_text()
    assert "broker 101" in text and "epochs 3,120" in text and "no state events from this broker" in text
    assert "online epoch 3" in text and "broker-cut-both-ways n101" in text
    panels = [p["data-f"] for p in page.with_class("panel", "g")]
    assert panels[:3] == ["read", "write", "cas"] and panels[3:] == ["create_topic", "describe_topic (broker)"]


def test_chromium_draws_the_broker_lanes(tmp_path):
    run_dir = build_run(tmp_path, duration_s=20)
    add_brokers(run_dir)
    out = write_report(run_dir)
    png = tmp_path / "brokers.png"
    done = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1000", out.resolve().as_uri())
    assert png.is_file(), done.stderr[-2000:]
    assert not console_errors(done.stderr)
    image = decode(png.read_bytes())
    pixels = [image.pixel(x, y) for y in range(0, image.height, 5) for x in range(0, image.width, 5)]
    assert any(near(p, "#0d9488") for p in pixels), "no online broker band"
    assert any(near(p, "#fca5a5") for p in pixels), "no fenced broker band"


def add_voter_changes(run_dir: Path) -> None:
    """The membership nemesis's events (issue 17): node 3 removed from 4 s
    to 5 s, added back from 9 s to 11 s; a refused addition of node 2 (a
    voter already) whose set does not change."""
    S = 1_000_000_000
    history = run_dir / "history.jsonl"
    events = [json.loads(line) for line in history.read_text().splitlines()]

    def change(f: str, fault_id: int, node: int, start_s: float, end_s: float, before: list, after: list, outcome: str):
        start = {"fault_id": fault_id, "node": node, "directory_id": f"dir{node}", "voters_before": before}
        end = {**start, "outcome": outcome, "voters_after": after}
        return [
            {"process": "nemesis", "type": "info", "f": f, "key": None, "time": int(start_s * S), "value": {"phase": "start", "fault": start}},
            {"process": "nemesis", "type": "info", "f": f, "key": None, "time": int(end_s * S), "value": {"phase": "end", "fault": end}},
        ]

    events += change("remove-voter", 11, 3, 4, 5, [1, 2, 3], [1, 2], "ok")
    events += change("add-voter", 12, 3, 9, 11, [1, 2], [1, 2, 3], "ok")
    events += change("add-voter", 13, 2, 13, 13.5, [1, 2, 3], [1, 2, 3], "refused")
    events.sort(key=lambda event: event["time"])
    for index, event in enumerate(events):
        event["index"] = index
    history.write_text("".join(json.dumps(event) + "\n" for event in events))


def test_voter_changes_are_bands_and_a_removed_controller_is_marked_not_a_voter(tmp_path):
    run_dir = build_run(tmp_path, duration_s=20)
    add_voter_changes(run_dir)
    data = load_run(run_dir)
    assert data.non_voter_spans() == {"1": [], "2": [], "3": [(5 * 10**9, 11 * 10**9)]}
    [removal] = [fault for fault in data.faults if fault.f == "remove-voter"]
    assert removal.end_fault["voters_after"] == [1, 2] and removal.label() == "remove-voter n3"
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    text = page.all_text()
    assert "remove-voter n3" in text and "add-voter n3" in text and "add-voter n2" in text
    assert "not a voter" in text and "voter change: the node added, removed or given a new disk" in text
    assert len(page.with_class("non-voter", "g")) == 1
    # Node 3's lane (and node 2's, the refused addition) gets the voter-change strip.
    assert sum(1 for tag, a in page.tags if tag == "rect" and a.get("fill") == "url(#hatch-voters)") == 3


def test_without_voter_changes_no_controller_is_marked(run):
    run_dir, out = run
    assert load_run(run_dir).non_voter_spans() == {}
    assert "not a voter" not in Page(out.read_text(encoding="utf-8")).all_text()


def test_a_replacement_by_auto_join_is_a_voter_change(tmp_path):
    """The membership nemesis with ``--auto-join`` records a replaced disk
    that rejoined by itself as ``replace-voter-auto-join`` (issue 17): a
    voter change, drawn like the others, killing its node at the start."""
    run_dir = build_run(tmp_path, duration_s=20)
    history = run_dir / "history.jsonl"
    events = [json.loads(line) for line in history.read_text().splitlines()]
    start = {"fault_id": 21, "node": 2, "directory_id": "old2", "voters_before": [1, 2, 3]}
    end = {**start, "new_directory_id": "new2", "removed": {"outcome": "ok", "offset": 40}, "outcome": "ok",
           "rejoined_by": "auto-join", "rejoin_s": 2.5, "voters_after": [1, 2, 3]}  # fmt: skip
    for time_s, phase, fault in ((4, "start", start), (9, "end", end)):
        events.append({"process": "nemesis", "type": "info", "f": "replace-voter-auto-join", "key": None, "time": time_s * 10**9,
                       "value": {"phase": phase, "fault": fault}})  # fmt: skip
    events.sort(key=lambda event: event["time"])
    for index, event in enumerate(events):
        event["index"] = index
    history.write_text("".join(json.dumps(event) + "\n" for event in events))
    data = load_run(run_dir)
    [replacement] = [fault for fault in data.faults if fault.f == "replace-voter-auto-join"]
    assert replacement.end_fault["rejoined_by"] == "auto-join" and replacement.label() == "replace-voter-auto-join n2"
    page = Page(write_report(run_dir).read_text(encoding="utf-8"))
    assert "voter change: the node added, removed or given a new disk" in page.all_text()
    assert sum(1 for tag, a in page.tags if tag == "rect" and a.get("fill") == "url(#hatch-voters)") == 1
