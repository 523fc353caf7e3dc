"""How long a user waits for the checker on a small history.

    python -m bench.checker_small_bench [--runs N] [--ops N] [--cpu] [--json-out FILE]

Times ``jepsen-like check PATH`` end to end, in a fresh process each run, as
a user runs it: interpreter start, imports, the Spark session (two JVM
starts), the check, the summary. Two histories: a 3-operation register
history, and a synthetic metadata campaign of about 9,000 operations (with
node events and log dumps; ``--ops``). Each is run once untimed (it leaves
the driver JVM's class data archive behind if there was none yet; its time
is printed too), then ``--runs`` times (default 5); the median, min and max
are printed, with the machine's load average over the runs: on a shared
machine the figures grow with the load, so read them together. The target
(issue 19) is under 8 s for any history under 10,000 operations.

``--cpu`` also measures each run's CPU time, user + system, of the check's
process and everything it started (the Spark JVM and the Python workers):
the run's process stops Spark and waits for the JVM to exit before it
exits itself, so that the JVM's CPU is counted in its ``RUSAGE_CHILDREN``
(a JVM left to exit on its own is never reaped by it, and its CPU would be
lost). CPU time grows far less with the machine's load than wall time.

Every run must exit 0 with nothing from Spark on the terminal (no log4j
lines, no JVM warnings): the benchmark says so when one does not. Nothing is
asserted: the figures are printed (and written as JSON with ``--json-out``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

THREE_OPERATIONS = [
    {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1},
    {"index": 1, "time": 10, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 1},
    {"index": 2, "time": 20, "process": 1, "type": "invoke", "f": "read", "key": "x", "value": None},
    {"index": 3, "time": 30, "process": 1, "type": "ok", "f": "read", "key": "x", "value": 1},
    {"index": 4, "time": 40, "process": 0, "type": "invoke", "f": "cas", "key": "x", "value": [1, 2]},
    {"index": 5, "time": 50, "process": 0, "type": "ok", "f": "cas", "key": "x", "value": [1, 2]},
]

# What Spark or the JVM would print if their output leaked to the terminal.
_SPARK_NOISE = re.compile(r"WARN|log4j|incubator|NativeCodeLoader|Using Spark's default|SLF4J|\[cds\]|Exception in thread")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _one_run(path: Path, work: Path, cpu: bool = False) -> dict[str, Any]:
    arguments = [
        "check", str(path), "--spark-log", str(work / "spark.log"), "--out", str(work / f"{path.stem}-result.json"),
    ]
    if cpu:
        command = [sys.executable, "-m", "bench.checker_small_bench", "--run-and-reap", *arguments]
    else:
        command = [sys.executable, "-m", "jepsen_like.checker", *arguments]
    load_before = os.getloadavg()[0]
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    cpu_s = _children_cpu_s() - cpu_before
    terminal = completed.stdout + completed.stderr
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s if cpu else None,
        "exit": completed.returncode,
        "load_1m": (load_before + os.getloadavg()[0]) / 2,
        "noise_lines": [line for line in terminal.splitlines() if _SPARK_NOISE.search(line)],
        "terminal_tail": terminal[-2000:] if completed.returncode != 0 else "",
    }


def _operations(result_path: Path) -> int:
    return json.loads(result_path.read_text())["stats"]["operations"]


def _run_and_reap(arguments: list[str]) -> int:
    """``jepsen-like ARGUMENTS`` in this process, then stop Spark and wait
    for its JVM to exit (so that this process's parent counts the JVM's CPU
    in its ``RUSAGE_CHILDREN``); returns the command's exit code."""
    from jepsen_like.checker.cli import main as checker_main

    try:
        checker_main.main(arguments, prog_name="jepsen-like", standalone_mode=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    if process is not None and process.stdin is not None:
        process.stdin.close()  # Spark's gateway JVM exits when its stdin closes
        process.wait(timeout=300)
    return code


def _measure(label: str, path: Path, work: Path, runs: int, cpu: bool = False) -> dict[str, Any]:
    first = _one_run(path, work, cpu)
    timed = [_one_run(path, work, cpu) for _ in range(runs)]
    walls = [run["wall_s"] for run in timed]
    loads = [run["load_1m"] for run in timed]
    summary = {
        "history": label,
        "operations": _operations(work / f"{path.stem}-result.json"),
        "first_run_s": first["wall_s"],
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "max_s": max(walls),
        "walls_s": walls,
        "cpus_s": [run["cpu_s"] for run in timed] if cpu else None,
        "load_1m_min": min(loads),
        "load_1m_max": max(loads),
        "exits": sorted({run["exit"] for run in [first, *timed]}),
        "noise_lines": sorted({line for run in [first, *timed] for line in run["noise_lines"]}),
    }
    failed = [run for run in [first, *timed] if run["exit"] != 0]
    if failed:
        summary["failure"] = failed[0]["terminal_tail"]
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code (0 unless it could not run)."""
    parser = argparse.ArgumentParser(prog="python -m bench.checker_small_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per history (after one untimed)")
    parser.add_argument("--ops", type=int, default=9_000, help="base operations of the synthetic campaign")
    parser.add_argument("--quick", action="store_true", help="3 timed runs")
    parser.add_argument("--cpu", action="store_true", help="also measure each run's CPU seconds, the JVM's included")
    parser.add_argument("--json-out", type=Path, default=None)
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--run-and-reap"]:
        return _run_and_reap(argv[1:])
    arguments = parser.parse_args(argv)
    runs = 3 if arguments.quick else max(1, arguments.runs)

    with tempfile.TemporaryDirectory(prefix="checker-small-bench-") as directory:
        work = Path(directory)
        three = work / "three.jsonl"
        three.write_text("".join(json.dumps(event) + "\n" for event in THREE_OPERATIONS))
        campaign = work / "campaign"
        subprocess.run(
            [sys.executable, "-m", "jepsen_like.checker", "synth", "--ops", str(arguments.ops), "--seed", "1",
             "--out", str(campaign)],
            cwd=REPO, check=True, capture_output=True,
        )
        print(f"checker, small histories end to end ({runs} timed runs each; nproc {os.cpu_count()})", flush=True)
        results = []
        for label, path in (("3 operations", three), ("synthetic campaign", campaign)):
            summary = _measure(label, path, work, runs, arguments.cpu)
            results.append(summary)
            print(
                f"{label:20} {summary['operations']:>6,} ops: median {summary['median_s']:5.1f} s "
                f"(min {summary['min_s']:.1f}, max {summary['max_s']:.1f}; first run {summary['first_run_s']:.1f} s) "
                f"load average {summary['load_1m_min']:.1f}-{summary['load_1m_max']:.1f}; "
                f"exit {','.join(map(str, summary['exits']))}; "
                + ("nothing from Spark on the terminal" if not summary["noise_lines"] else f"TERMINAL NOISE: {summary['noise_lines'][:3]}"),
                flush=True,
            )
            if arguments.cpu:
                cpus = summary["cpus_s"]
                print(
                    f"{'':20} CPU, JVM included: median {statistics.median(cpus):5.1f} s "
                    f"(runs: {', '.join(f'{value:.1f}' for value in cpus)})",
                    flush=True,
                )
            if "failure" in summary:
                print(summary["failure"], flush=True)
    if arguments.json_out is not None:
        arguments.json_out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
