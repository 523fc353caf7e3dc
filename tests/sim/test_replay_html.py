"""The simulator's visual replay (``jepsen-like sim --html``): the recorder
leaves the run unchanged, and the page of the zombie-leader story has the
structure that tells it (always checked) and is built by its script in
headless Chromium (when Debian's ``chromium`` is installed; otherwise those
tests skip and say so)."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from headless_chromium import chromium, console_errors
from click.testing import CliRunner

from jepsen_like.sim import SimOptions, run_scenario
from jepsen_like.sim import _replay_html
from jepsen_like.sim._recorder import Recording
from jepsen_like.sim._replay_html import render_replay, write_replay
from jepsen_like.sim.cli import sim_command

SEED = 7


def recorded_run(check_quorum: bool, seed: int = SEED, scenario: str = "zombie-leader"):
    options = SimOptions(check_quorum=check_quorum, recorder=Recording())
    return run_scenario(scenario, seed, options)


class Page(HTMLParser):
    """Start tags with attributes, and the contents of script elements."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._script: dict[str, str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if tag == "script":
            self._script = attributes

    def handle_data(self, data):
        if self._script is not None:
            self.scripts.append((self._script, data))

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def with_class(self, name: str, tag: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if name in a.get("class", "").split() and (tag is None or t == tag)]

    def by_id(self, element_id: str) -> dict[str, str]:
        found = [a for _, a in self.tags if a.get("id") == element_id]
        assert len(found) == 1, element_id
        return found[0]

    def data(self) -> dict:
        blocks = [text for attrs, text in self.scripts if attrs.get("id") == "replay-data"]
        assert len(blocks) == 1
        return json.loads(blocks[0])


@pytest.fixture(scope="module")
def zombie(tmp_path_factory):
    """The zombie-leader story, seed 7: (result, page path, Page) with check
    quorum off (the zombie serves stale reads) and on (it resigns)."""
    out = tmp_path_factory.mktemp("replay")
    runs = {}
    for name, check_quorum in (("off", False), ("on", True)):
        result = recorded_run(check_quorum)
        path = write_replay(result, out / f"zombie-{name}.html", command=f"jepsen-like sim --seed {SEED}")
        runs[name] = (result, path, Page(path.read_text(encoding="utf-8")))
    return runs


# =========================================================================
# The recorder
# =========================================================================


@pytest.mark.parametrize("scenario", ["zombie-leader", "random"])
def test_recording_a_run_does_not_change_it(scenario):
    plain = run_scenario(scenario, 11)
    options = plain.simulation.options
    options.recorder = Recording()
    recorded = run_scenario(scenario, 11, options)
    assert recorded.simulation.history == plain.simulation.history
    assert recorded.summary() == plain.summary()
    assert recorded.simulation.options.recorder.messages  # it did record


def test_the_recording_follows_the_zombie_story(zombie):
    result, _, _ = zombie["off"]
    recording = result.simulation.options.recorder
    isolated = result.extra["isolated_leader"]
    others = sorted(set(recording.nodes) - {isolated})
    # The partition cuts exactly the isolated leader's links, and is healed.
    cut = [links for _, links in recording.blocked if links]
    assert cut == [tuple(sorted({(isolated, o) for o in others} | {(o, isolated) for o in others}))]
    assert recording.blocked[-1][1] == ()
    # Messages from the zombie to the others are dropped by the partition.
    partition_start = next(t for t, links in recording.blocked if links)
    dropped = [m for m in recording.messages if m[6] == "partitioned"]
    assert dropped and all(m[0] >= partition_start and isolated in (m[2], m[3]) for m in dropped)
    assert all(m[6] in ("delivered", "partitioned", "pending", "discarded") for m in recording.messages)
    # A later epoch's leader on the other side; the zombie never resigns.
    leaders = {(node, epoch) for _, node, role, epoch, _, _ in recording.roles if role == "leader"}
    assert (isolated, 1) in leaders and any(node in others and epoch > 1 for node, epoch in leaders)
    assert not any(role == "resigned" for _, _, role, _, _, _ in recording.roles)
    # The log record of each committed write, with its epoch, on every node.
    appended = {(op[2], op[3]) for node in others for op in recording.logs[node] if op[1] == "append"}
    assert {(offset, record[0]) for offset, record in result.simulation.committed.items()} <= appended


def test_an_unrecorded_run_has_no_replay(tmp_path):
    result = run_scenario("zombie-leader", SEED)
    with pytest.raises(ValueError, match="not recorded"):
        write_replay(result, tmp_path / "replay.html")
    assert not (tmp_path / "replay.html").exists()


# =========================================================================
# The page's structure
# =========================================================================


@pytest.mark.parametrize("name", ["off", "on"])
def test_the_page_has_a_lane_per_node_arrows_filters_and_a_slider(zombie, name):
    result, _, page = zombie[name]
    data = page.data()
    nodes = sorted(result.simulation.nodes)
    assert data["nodes"] == nodes
    assert sorted(int(a["data-node"]) for a in page.with_class("lane", "g")) == nodes
    # Every delivered message is a line between two lanes.
    delivered = [m for m in data["messages"] if m[6] == "delivered"]
    assert len(page.with_class("msg", "line")) == len(delivered) > 100
    # Role bands carry the epoch; the isolated leader's band says Leader e1.
    assert any(s[2] == "leader" and s[3] == 1 for s in data["segments"][str(result.extra["isolated_leader"])])
    # A checkbox per message type present in the run, a slider, step buttons.
    boxes = {a["data-type"] for t, a in page.tags if t == "input" and "data-type" in a}
    assert boxes == set(data["types"]) >= {"Fetch", "FetchResp", "Vote", "VoteResp", "BeginEpoch"}
    slider = page.by_id("slider")
    assert slider["type"] == "range" and float(slider["max"]) == data["end_ms"]
    for button in ("b-prev", "b-next", "b-prev-moment", "b-next-moment", "b-play"):
        page.by_id(button)
    # The partition is drawn and labelled, the isolated node's lane shaded.
    assert [f["cut_off"] for f in data["faults"]] == [[result.extra["isolated_leader"]]]
    assert page.with_class("fault-bar") and page.with_class("fault-shade")
    # Two leaders at once, each in its own epoch.
    assert page.with_class("two-leaders", "g")
    assert [pair for _, _, pair in data["leaders"]][0][0] == [result.extra["isolated_leader"], 1]


def test_stale_reads_are_marked_only_with_check_quorum_off(zombie):
    result_off, _, page_off = zombie["off"]
    result_on, _, page_on = zombie["on"]
    assert result_off.stale_reads > 0 and result_on.stale_reads == 0
    assert len(page_off.with_class("stale-mark", "circle")) == result_off.stale_reads
    assert page_on.with_class("stale-mark") == []
    moments_off = [kind for _, kind, _ in page_off.data()["moments"]]
    assert "stale" in moments_off and "resigned" not in moments_off
    text = Path(zombie["off"][1]).read_text(encoding="utf-8")
    assert "INVALID" in text and f"first of {result_off.stale_reads} stale reads via n{result_off.extra['isolated_leader']}" in text


def test_the_resignation_is_marked_only_with_check_quorum_on(zombie):
    result_on, _, page_on = zombie["on"]
    _, _, page_off = zombie["off"]
    isolated = result_on.extra["isolated_leader"]
    assert len(page_on.with_class("resign-mark", "g")) >= 1
    assert page_off.with_class("resign-mark") == []
    moments = page_on.data()["moments"]
    resigned = [text for _, kind, text in moments if kind == "resigned"]
    assert resigned and resigned[0].startswith(f"n{isolated} resigned epoch 1: check quorum")
    # The clock opens on the resignation, where the story turns.
    assert page_on.data()["start_ms"] == next(t for t, kind, _ in moments if kind == "resigned")


def test_the_page_is_self_contained(zombie):
    text = Path(zombie["off"][1]).read_text(encoding="utf-8")
    page = zombie["off"][2]
    assert not [a for t, a in page.tags if "src" in a or t in ("link", "iframe", "img")]
    assert not re.search(r"https?://|@import|url\((?!#)", text)


def test_long_runs_are_thinned_and_say_so(zombie, monkeypatch):
    result, _, _ = zombie["off"]
    monkeypatch.setattr(_replay_html, "MAX_MESSAGES", 120)
    page = Page(render_replay(result))
    data = page.data()
    recorded = result.simulation.options.recorder.messages
    kept_other = [m for m in data["messages"] if m[4] not in ("Fetch", "FetchResp")]
    assert len(data["messages"]) == 120 < len(recorded) == data["messages_total"]
    assert len(kept_other) == sum(1 for m in recorded if m[4] not in ("Fetch", "FetchResp"))
    assert data["messages_thinned"] and page.with_class("note")


def test_the_cli_writes_the_page_and_prints_its_path(tmp_path):
    out = tmp_path / "replay.html"
    done = CliRunner().invoke(
        sim_command, ["--scenario", "zombie-leader", "--seed", str(SEED), "--trace", "none", "--html", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert f"replay page: {out}" in done.output
    data = Page(out.read_text(encoding="utf-8")).data()
    assert data["command"] == f"jepsen-like sim --scenario zombie-leader --seed {SEED} --html {out}"


# =========================================================================
# Headless Chromium
# =========================================================================


def test_chromium_builds_the_view_and_steps_through_it(zombie, tmp_path):
    """The script draws a close-up lane and a log row per node, the trace,
    and arrows; the right arrow key moves the clock to the next event;
    unticking Fetch removes Fetch arrows from the close-up."""
    result, path, page = zombie["off"]
    data = page.data()
    probe = (
        "<script>(function(){var b=document.body,r=[];"
        "function c(s){return document.querySelectorAll(s).length;}"
        "r.push(b.classList.contains('replay-ready'),c('#closeup-svg .cl-lane'),c('#logs-svg .log-lane'),"
        "c('#trace li'),c('#closeup-svg .arrow'),b.dataset.t);"
        "document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowRight',bubbles:true}));r.push(b.dataset.t);"
        "document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowLeft',bubbles:true}));r.push(b.dataset.t);"
        "document.getElementById('window').value='5000';document.getElementById('window').dispatchEvent(new Event('change'));"
        "r.push(c('#closeup-svg .arrow.t-Fetch'));"
        "var box=document.querySelector('input[data-type=Fetch]');box.checked=false;box.dispatchEvent(new Event('change'));"
        "r.push(c('#closeup-svg .arrow.t-Fetch'),c('#closeup-svg .arrow'));"
        "r.push(c('#logs-svg .log-rec.committed'),c('#trace li.at'));"
        "b.setAttribute('data-probe',r.join('|'));})();</script>"
    )
    driver = tmp_path / "driver.html"
    driver.write_text(path.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    done = chromium(tmp_path, "--window-size=1400,2000", "--dump-dom", driver.resolve().as_uri())
    assert not console_errors(done.stderr), done.stderr[-2000:]
    match = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert match, done.stderr[-2000:]
    (ready, lanes, log_lanes, trace, arrows, t0, t_next, t_back, fetch_wide, fetch_hidden, arrows_left, committed, at) = (
        html.unescape(match.group(1)).split("|")
    )
    nodes = len(result.simulation.nodes)
    assert ready == "true" and int(lanes) == nodes and int(log_lanes) == nodes
    assert int(trace) == len(data["story"]) and int(arrows) > 0
    assert float(t0) == pytest.approx(data["start_ms"], abs=1e-3)
    assert float(t_next) > float(t0) and float(t_back) == pytest.approx(float(t0), abs=1e-3)
    assert int(fetch_wide) > 0 and int(fetch_hidden) == 0 and int(arrows_left) > 0
    assert int(committed) > 0 and int(at) == 1


def _png_decoder():
    spec = importlib.util.spec_from_file_location(
        "_report_png", Path(__file__).resolve().parents[1] / "report" / "_report_png.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module.decode


def near(pixel: tuple[int, int, int], colour: str, tolerance: int = 14) -> bool:
    rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb))


def test_chromium_renders_the_page(zombie, tmp_path):
    _, path, _ = zombie["off"]
    png = tmp_path / "replay.png"
    done = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1600", path.resolve().as_uri())
    assert png.is_file(), done.stderr[-2000:]
    assert not console_errors(done.stderr)
    image = _png_decoder()(png.read_bytes())
    assert (image.width, image.height) == (1400, 1600)
    pixels = [image.pixel(x, y) for y in range(0, image.height, 5) for x in range(0, image.width, 5)]
    assert len(set(pixels)) > 50, "the screenshot is (nearly) one colour"
    top = pixels[: len(pixels) // 8]
    assert any(near(p, "#dc2626") for p in top), "no red verdict"
    assert sum(1 for p in pixels if near(p, "#1e3a8a")) > 200, "no leader bands"
    assert sum(1 for p in pixels if near(p, "#86efac")) > 100, "no follower bands"
