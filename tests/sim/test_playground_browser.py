"""The browser playground in a real browser (issue 22): headless Chromium
loads the built folder from disk (file://, no network), replays a shared
URL to the Python simulator's trace byte for byte, brings a new leader after
a click crashes the old one, and runs every lesson to its check through the
page's buttons (a screenshot of each end state is kept under the test's
tmp dir, ``playground-lessons/``). Skips with one loud line when Chromium or
Pyodide (tools/playground-fetch.sh) is missing."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest
from _playground_solutions import SOLUTIONS, recorded_session, selector
from click.testing import CliRunner
from headless_chromium import PageSession, skip_loudly

from jepsen_like.sim._lessons import LESSONS
from jepsen_like.sim.cli import sim_command

ROOT = Path(__file__).resolve().parents[2]
# Loading Pyodide on a loaded 2-core machine: generous, still bounded.
LOAD_TIMEOUT_S = 120


def _builder():
    spec = importlib.util.spec_from_file_location("build_playground", ROOT / "tools" / "build_playground.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recorded():
    return recorded_session()


@pytest.fixture(scope="module")
def page(tmp_path_factory, recorded):
    """One browser for the module (loading Pyodide is the slow part),
    opened on a share URL of the recorded session."""
    builder = _builder()
    pyodide_dir = builder.default_pyodide_dir()
    if not (pyodide_dir / "pyodide.asm.wasm").is_file():
        skip_loudly(f"no Pyodide {builder.PYODIDE_VERSION} in {pyodide_dir} (tools/playground-fetch.sh fetches it from npm): the playground is not tested in a browser")
    out = tmp_path_factory.mktemp("playground-build") / "playground"
    index = builder.build(out, pyodide_dir)
    session = json.dumps(recorded.session())
    url = index.resolve().as_uri() + "#session=" + base64.urlsafe_b64encode(session.encode()).decode().rstrip("=")
    began = time.monotonic()
    with PageSession(tmp_path_factory.mktemp("chromium"), width=1400, height=1300) as browser:
        browser.navigate(url)
        browser.wait_for("document.body.classList.contains('playground-ready') || window.playground.error", timeout_s=LOAD_TIMEOUT_S)
        browser.load_s = time.monotonic() - began
        yield browser


def click(page: PageSession, css: str) -> None:
    found = page.evaluate(f"(function(){{var b=document.querySelector({json.dumps(css)}); if(!b) return false; b.click(); return true;}})()")
    assert found, f"no {css} on the page"
    errors = [line for line in page.console if line.startswith("Uncaught") or line.startswith("error")]
    assert not errors, errors


def test_the_page_loads_from_disk_with_no_network_and_no_error(page):
    assert page.evaluate("window.playground.error || ''") == ""
    assert not [line for line in page.console if line.startswith("Uncaught") or "network" in line], page.console
    view = page.evaluate("window.playground.view()")
    assert [n["id"] for n in view["nodes"]] == [1, 2, 3]
    # the phases of the first load, marked by the page in order (bench.playground_bench prints them)
    timings = page.evaluate("window.playground.timings")
    phases = ["scripts-parsed", "pyodide-booted", "playground-imported", "lessons-imported", "first-steps", "first-render"]
    assert list(timings) == phases and [timings[name] for name in phases] == sorted(timings.values())
    # this machine has Node.js, so the build compiled the Python with Pyodide's own interpreter
    assert page.evaluate("window.PYKRAFT_COMPILED") is True
    print(f"playground loaded in {page.load_s:.1f} s (page's own count: {page.evaluate('document.body.dataset.loadMs')} ms; phases {timings})")


def test_a_replay_url_gives_the_python_simulators_trace(page, recorded, tmp_path):
    path = tmp_path / "session.json"
    path.write_text(json.dumps(recorded.session()), encoding="utf-8")
    outcome = CliRunner().invoke(sim_command, ["--from-playground", str(path)])
    assert outcome.exit_code == 0
    assert page.evaluate("window.playground.traceText()") == outcome.stdout
    assert page.evaluate("window.playground.view().now_us") == recorded.now_us
    # and the page's own share link carries the same session
    shared = page.evaluate("window.playground.shareUrl()").split("#session=", 1)[1]
    document = json.loads(base64.urlsafe_b64decode(shared + "=" * (-len(shared) % 4)))
    assert document["actions"] == recorded.session()["actions"] and document["seed"] == 7


def test_clicking_crash_on_the_leader_brings_a_new_leader(page):
    page.evaluate("document.getElementById('seed').value = '7'")
    click(page, "#b-new")
    for _ in range(3):
        click(page, "#b-skip")
    view = page.evaluate("window.playground.view()")
    old = view["leader"]
    assert old is not None and page.evaluate("document.body.dataset.leader") == str(old)
    click(page, f'#nodes button[data-do="crash"][data-node="{old}"]')
    for _ in range(3):
        click(page, "#b-skip")
    view = page.evaluate("window.playground.view()")
    assert view["leader"] not in (None, old)
    assert next(n for n in view["nodes"] if n["id"] == old)["up"] is False
    assert page.evaluate("document.body.dataset.leader") == str(view["leader"])
    assert page.evaluate(f"document.querySelector('#cluster .node[data-node=\"{view['leader']}\"]').classList.contains('leader')")


@pytest.mark.parametrize("lesson_id", [found.id for found in LESSONS])
def test_each_lesson_reaches_its_check_in_the_page(page, lesson_id, tmp_path_factory):
    page.evaluate(f"(function(){{var s=document.getElementById('lesson-select'); s.value={json.dumps(lesson_id)}; s.dispatchEvent(new Event('change'));}})()")
    assert page.evaluate("window.playground.lessonCheck()")["done"] is False
    for kind, arg in SOLUTIONS[lesson_id]:
        if kind == "advance":
            page.evaluate(f"window.playground.advance({arg}) && true")
        else:
            where = "#links " if arg["do"] in ("cut", "mend", "heal", "add_broker") else "#nodes "
            click(page, where + selector(arg))
    check = page.evaluate("window.playground.lessonCheck()")
    shots = Path(tmp_path_factory.getbasetemp()) / "playground-lessons"
    shots.mkdir(exist_ok=True)
    page.screenshot(shots / f"{lesson_id}.png")
    assert check["done"], check["detail"]
    assert page.evaluate("document.getElementById('lesson-check').className") == "done"


def test_one_click_cuts_a_zone_from_the_rest_and_one_mends_it(page):
    page.evaluate("document.getElementById('seed').value = '7'; document.getElementById('lesson-select').value = ''")
    click(page, "#b-new")
    click(page, "#b-skip")
    click(page, '#links button[data-do="cut_zone"][data-zone="az2"]')
    assert page.evaluate("window.playground.view().cut") == [[1, 2], [2, 3]]
    assert json.loads(page.evaluate("window.playground.session()"))["actions"] == [{"at_us": 1_000_000, "do": "cut_zone", "zone": "az2"}]
    assert "PARTITION zone az2 (n2) | n1 n3" in page.evaluate("window.playground.traceText()")
    click(page, '#links button[data-do="mend_zone"][data-zone="az2"]')
    assert page.evaluate("window.playground.view().cut") == []


def test_the_rewind_slider_goes_back_to_an_exact_moment(page):
    """Rewinding replays from the seed; the actions taken after that moment
    play again as time moves on, until the learner does something new."""
    from jepsen_like.sim._playground import Playground

    page.evaluate("document.getElementById('seed').value = '7'; document.getElementById('lesson-select').value = ''")
    click(page, "#b-new")
    for _ in range(3):
        click(page, "#b-skip")
    click(page, '#nodes button[data-do="pause"][data-node="2"]')
    click(page, '#nodes button[data-isolate="3"]')
    for _ in range(2):
        click(page, "#b-skip")
    session = json.loads(page.evaluate("window.playground.session()"))
    assert session["actions"] == [
        {"at_us": 3_000_000, "do": "pause", "node": 2},
        {"at_us": 3_000_000, "do": "cut", "node": 1, "peer": 3},
        {"at_us": 3_000_000, "do": "cut", "node": 2, "peer": 3},
    ]
    page.evaluate("(function(){var r=document.getElementById('rewind'); r.value='2500'; r.dispatchEvent(new Event('change'));})()")
    assert page.evaluate("window.playground.view().now_us") == 2_500_000
    assert page.evaluate("window.playground.traceText()") == "".join(line + "\n" for line in Playground.replay(session, until_us=2_500_000).trace)
    for _ in range(3):
        click(page, "#b-skip")
    whole = Playground.replay(session, until_us=5_500_000)
    assert page.evaluate("window.playground.traceText()") == "".join(line + "\n" for line in whole.trace)
    assert any("n2 PAUSE" in line for line in whole.trace)
