"""The browser playground's speed in this machine's headless Chromium:
the cold first load from disk, over file:// (issue 22: under 5 s), and
simulated events per second of the in-browser simulator (the real pykraft
core under Pyodide; issue 22 asks for at least 2,000).

It builds the playground into a temporary folder (Pyodide from
tools/playground-fetch.sh; its Python compiled by Pyodide under Node.js, as
``make playground`` does), then loads it ``--loads`` times, each in a fresh
headless Chromium with a fresh profile (cold: no HTTP, code or wasm cache),
over the DevTools pipe (tests/headless_chromium.py's PageSession), and
prints the median of: the wall time from navigation to ready (the host's
clock and the page's own count from navigation start), Chromium's CPU time
(user + system of all its processes) from navigation to ready and for the
browser's own start, and each phase the page marks (window.playground.timings:
scripts parsed, Pyodide booted, modules imported, first steps, first render).
CPU time does not grow with what else the machine runs; wall time does, so
the line also gives the load average.

Then, unless ``--load-only``, it runs a fresh 3-voter cluster for N
simulated seconds in the last page and reads the simulator's own event
count; then runs the same session in this CPython, which must process
exactly as many events.

Run: ``python -m bench.playground_bench [--loads 5] [--load-only] [--seconds 60] [--quick]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def _tree_cpu_s(root_pid: int) -> float:
    """CPU seconds (user + system) used so far by ``root_pid`` and all its
    descendants: what the load cost, whatever else the machine is doing."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    tree = {root_pid}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(cpu.get(pid, 0.0) for pid in tree)


PHASES = ("scripts-parsed", "pyodide-booted", "playground-imported", "lessons-imported", "first-steps", "first-render")


def cold_load(headless, index: Path, profile: Path) -> dict:
    """One cold load of ``index`` in a fresh Chromium; its figures. Leaves
    the page open in ``page`` for the caller (closed by the caller)."""
    profile.mkdir()
    began = time.monotonic()
    page = headless.PageSession(profile)
    start_cpu_s = _tree_cpu_s(page.pid)
    start_s = time.monotonic() - began
    navigated = time.monotonic()
    page.navigate(index.resolve().as_uri())
    page.wait_for("document.body.classList.contains('playground-ready') || window.playground.error", timeout_s=120)
    wall_s = time.monotonic() - navigated
    cpu_s = _tree_cpu_s(page.pid) - start_cpu_s
    error = page.evaluate("window.playground.error || ''")
    figures = {"page": page, "error": error, "wall_s": wall_s, "cpu_s": cpu_s, "start_s": start_s, "start_cpu_s": start_cpu_s}
    if not error:
        figures["page_s"] = page.evaluate("Number(document.body.dataset.loadMs)") / 1000
        figures["phases_ms"] = page.evaluate("window.playground.timings")
        figures["compiled"] = page.evaluate("window.PYKRAFT_COMPILED")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.playground_bench")
    parser.add_argument("--loads", type=int, default=5, help="cold first loads to take the median of")
    parser.add_argument("--load-only", action="store_true", help="only the first load, not the simulator's speed")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds to run in the page")
    parser.add_argument("--quick", action="store_true", help="10 simulated seconds, 3 loads")
    args = parser.parse_args(argv)
    seconds = 10.0 if args.quick else args.seconds
    loads = 3 if args.quick else max(1, args.loads)
    builder = _load("build_playground", ROOT / "tools" / "build_playground.py")
    pyodide_dir = builder.default_pyodide_dir()
    if not (pyodide_dir / "pyodide.asm.wasm").is_file():
        print(f"[playground_bench] skipped: no Pyodide in {pyodide_dir} (run tools/playground-fetch.sh)")
        return 0
    headless = _load("headless_chromium", ROOT / "tests" / "headless_chromium.py")
    if not headless.CHROMIUM.exists():
        print(f"[playground_bench] skipped: {headless.MISSING_REASON}")
        return 0
    with tempfile.TemporaryDirectory(prefix="playground-bench-") as temp:
        index = builder.build(Path(temp) / "playground", pyodide_dir)
        runs = []
        load_averages = []
        for number in range(loads):
            figures = cold_load(headless, index, Path(temp) / f"profile-{number}")
            load_averages.append(os.getloadavg()[0])
            if figures["error"]:
                figures["page"].close()
                print(f"[playground_bench] the page failed to load: {figures['error']}")
                return 1
            if number < loads - 1 or args.load_only:
                figures["page"].close()
            runs.append(figures)
        page = runs[-1]["page"]
        median = lambda name: statistics.median(run[name] for run in runs)  # noqa: E731
        print(
            f"playground first load from disk (file://, cold, median of {loads}): {median('wall_s'):.2f} s wall to ready"
            f" (page's own count from navigation start: {median('page_s'):.2f} s);"
            f" Chromium's CPU from navigation to ready: {median('cpu_s'):.2f} s (its own start before that: {median('start_s'):.2f} s wall,"
            f" {median('start_cpu_s'):.2f} s CPU); load average {min(load_averages):.1f}-{max(load_averages):.1f};"
            f" Python {'compiled at build' if runs[0]['compiled'] else 'compiled in the page (no Node.js at build)'}"
        )
        phases = "  ".join(f"{name} {statistics.median(run['phases_ms'][name] for run in runs):.0f}" for name in PHASES)
        print(f"  phases, median ms from navigation start to the end of each: {phases}")
        print(
            "  runs (wall s / CPU s): "
            + ", ".join(f"{run['wall_s']:.2f}/{run['cpu_s']:.2f}" for run in runs)
        )
        if args.load_only:
            return 0
        try:
            result = page.evaluate(f"window.playground.bench({seconds})", timeout_s=600)
        finally:
            page.close()
    from jepsen_like.sim._playground import PageDriver

    driver = PageDriver(11)
    started = time.perf_counter()
    driver.advance(int(seconds * 1_000_000))
    cpython_s = time.perf_counter() - started
    cpython_events = driver.playground.sim.events_processed
    print(
        f"playground in-browser simulator: {result['events_per_s']:,.0f} simulated events/s"
        f" ({result['events']} events for {seconds:.0f} simulated s in {result['seconds']:.2f} s; target >= 2,000)"
    )
    print(f"same run in this CPython: {cpython_events / cpython_s:,.0f} events/s ({cpython_events} events)")
    if result["events"] != cpython_events:
        print(f"[playground_bench] MISMATCH: the page processed {result['events']} events, CPython {cpython_events}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
