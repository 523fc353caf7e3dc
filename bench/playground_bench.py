"""The browser playground's speed in this machine's headless Chromium:
simulated events per second of the in-browser simulator (the real pykraft
core under Pyodide; issue 22 asks for at least 2,000), and the first load
from disk, over file:// (issue 22: under 5 s).

It builds the playground into a temporary folder (Pyodide from
tools/playground-fetch.sh), opens it in headless Chromium over the DevTools
pipe (tests/headless_chromium.py's PageSession), waits until the page is
ready, then runs a fresh 3-voter cluster for N simulated seconds in the page
and reads the simulator's own event count; then runs the same session in this
CPython, which must process exactly as many events. Prints one line per figure.

Run: ``python -m bench.playground_bench [--seconds 60] [--quick]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.playground_bench")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds to run in the page")
    parser.add_argument("--quick", action="store_true", help="10 simulated seconds")
    args = parser.parse_args(argv)
    seconds = 10.0 if args.quick else args.seconds
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
        began = time.monotonic()
        with headless.PageSession(Path(temp)) as page:
            page.navigate(index.resolve().as_uri())
            page.wait_for("document.body.classList.contains('playground-ready') || window.playground.error", timeout_s=120)
            load_s = time.monotonic() - began
            load_cpu_s = _tree_cpu_s(page.pid)
            error = page.evaluate("window.playground.error || ''")
            if error:
                print(f"[playground_bench] the page failed to load: {error}")
                return 1
            page_load_ms = page.evaluate("Number(document.body.dataset.loadMs)")
            result = page.evaluate(f"window.playground.bench({seconds})", timeout_s=600)
    from jepsen_like.sim._playground import PageDriver

    driver = PageDriver(11)
    started = time.perf_counter()
    driver.advance(int(seconds * 1_000_000))
    cpython_s = time.perf_counter() - started
    cpython_events = driver.playground.sim.events_processed
    print(
        f"playground first load from disk: {load_s:.2f} s to ready (page's own count from navigation: {page_load_ms / 1000:.2f} s;"
        f" Chromium's CPU time for start + load: {load_cpu_s:.2f} s; load average {os.getloadavg()[0]:.1f})"
    )
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
