"""Benchmark of the history checker.

    python -m bench.checker_bench [--quick] [--work-dir DIR] [--json-out FILE]

Measures, each case in its own process (so that resource usage is the
case's own):

- tier 1 (Spark DataFrame checks, tier 2 off) on synthetic metadata
  histories of 1M and 10M operations (--quick: 100k and 1M), on local[2],
  and how wall and CPU time grow with size;
- tier 2 (per-key linearizability on the executors) on 1M operations over
  10,000 keys (--quick: 100k over 1,000);
- the pure-Python reference checker on the sizes it can finish (each size
  has a time limit), next to the Spark job on the same histories;
- small histories end to end, as a user runs them (``jepsen-like check
  PATH`` in a fresh process: interpreter, Spark session and check): a
  3-operation register history and a ~5,000-operation synthetic one
  (the target: under 8 s for any history under 10,000 operations);
- the 102 Porcupine etcd histories: the Spark job's time with session start
  separated, the pure-Python WGL search alone, and the reference checker
  (Porcupine, in Go, takes about 0.6-1.5 s on this machine).

For each case: wall seconds; CPU seconds of the driver (this process,
RUSAGE_SELF) and of its children (the Spark JVM and the Python workers it
forks, RUSAGE_CHILDREN, collected after the JVM is stopped and reaped); peak
resident memory of the driver and of the largest child.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PORCUPINE_JSONL = REPO.parent / "shared" / "porcupine" / "jsonl"
MASTER = "local[2]"


# ---------------------------------------------------------------------------
# Cases (run in a child process: `--case JSON`).


def _usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cpu_driver_s": own.ru_utime + own.ru_stime,
        "cpu_children_s": children.ru_utime + children.ru_stime,
        "peak_rss_driver_mb": own.ru_maxrss / 1024,
        "peak_rss_largest_child_mb": children.ru_maxrss / 1024,
    }


def _stop_spark(spark: Any) -> None:
    """Stop Spark and reap its JVM, so that RUSAGE_CHILDREN includes it (and,
    through it, the Python workers it reaped)."""
    process = spark.sparkContext._gateway.proc
    spark.stop()
    if process is not None:
        process.stdin.close()  # the gateway JVM exits when its stdin closes
        process.wait(timeout=120)


def _case_synth(case: dict[str, Any]) -> dict[str, Any]:
    from jepsen_like.checker import synthesize

    made = Path(case["directory"]) / "synth.json"
    if made.exists():  # kept from an earlier run with the same --work-dir
        return {**json.loads(made.read_text()), "reused": True}
    started = time.monotonic()
    result = synthesize(
        case["directory"], ops=case["ops"], keys=case["keys"], processes=case.get("processes", 20),
        seed=case.get("seed", 1), history_format=case.get("format", "parquet"), side_format=case.get("format", "parquet"),
    )
    measured = {"wall_s": time.monotonic() - started, "events": result.events, "operations": result.operations}
    made.write_text(json.dumps(measured))
    return measured


def _case_spark(case: dict[str, Any]) -> dict[str, Any]:
    from jepsen_like.checker import DEFAULT_BUDGET_STEPS, check, spark_session

    started = time.monotonic()
    spark = spark_session(MASTER, conf=case.get("spark_conf"))  # spark_conf: {name: value}, to compare settings
    session_s = time.monotonic() - started
    timings: dict[str, float] = {}
    check_started = time.monotonic()
    results = check(
        case["paths"], spark=spark, timings=timings, linearizability=case.get("linearizability", True),
        budget_steps=case.get("budget_steps", DEFAULT_BUDGET_STEPS),
    )
    check_s = time.monotonic() - check_started
    _stop_spark(spark)
    if case.get("results_out"):  # to compare two trees' results, byte for byte
        Path(case["results_out"]).write_text(json.dumps([result.to_dict() for result in results], indent=1, sort_keys=True))
    valid = [result.valid for result in results]
    keys = [result.checks["linearizability"].get("keys") for result in results]
    return {
        "session_s": session_s,
        "check_s": check_s,
        "phases_s": {name: round(value, 2) for name, value in timings.items() if name != "session_s"},
        "histories": len(results),
        "valid": sum(1 for v in valid if v is True),
        "invalid": sum(1 for v in valid if v is False),
        "unknown": sum(1 for v in valid if v == "unknown"),
        "operations": sum(result.stats["operations"] for result in results),
        "keys": {
            name: sum((k or {}).get(name, 0) for k in keys) for name in ("total", "linearizable", "not-linearizable", "unknown")
        },
    }


def _case_reference(case: dict[str, Any]) -> dict[str, Any]:
    from jepsen_like.checker import check_reference

    started = time.monotonic()
    results = check_reference(case["paths"])
    return {
        "check_s": time.monotonic() - started,
        "histories": len(results),
        "valid": sum(1 for result in results if result.valid is True),
        "invalid": sum(1 for result in results if result.valid is False),
    }


def _case_wgl(case: dict[str, Any]) -> dict[str, Any]:
    """Tier 2 alone, in pure Python (no Spark): the search on every key."""
    from collections import defaultdict

    from jepsen_like.checker import check_operations, discover_histories, get_model
    from jepsen_like.checker._load import pair_operations, read_history_events, resolve_model_name
    from jepsen_like.checker._models import is_tier2_candidate

    load_s = search_s = 0.0
    verdicts = defaultdict(int)
    slowest = (0.0, "")
    for source in discover_histories(case["paths"]):
        started = time.monotonic()
        operations, _ = pair_operations(source, read_history_events(source))
        model = get_model(resolve_model_name(source, {o.f for o in operations}, None))
        by_key = defaultdict(list)
        for operation in operations:
            if is_tier2_candidate(operation, model):
                by_key[operation.key].append(operation)
        load_s += time.monotonic() - started
        started = time.monotonic()
        history_verdict = "linearizable"
        for key_ops in sorted(by_key.values(), key=len):
            verdict = check_operations(key_ops, model).verdict
            if verdict != "linearizable":
                history_verdict = verdict
                break
        elapsed = time.monotonic() - started
        search_s += elapsed
        slowest = max(slowest, (elapsed, source.name))
        verdicts[history_verdict] += 1
    return {"load_s": load_s, "search_s": search_s, "verdicts": dict(verdicts), "slowest": [round(slowest[0], 3), slowest[1]]}


def _case_cli(case: dict[str, Any]) -> dict[str, Any]:
    """``jepsen-like check PATH`` end to end, in a process of its own."""
    command = [sys.executable, "-m", "jepsen_like.checker", "check", *case["paths"], "--spark-master", MASTER,
               "--spark-log", case["spark_log"]]
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    return {"wall_s": time.monotonic() - started, "exit_code": completed.returncode,
            "stderr_chars": len(completed.stderr)}


THREE_OPERATION_HISTORY = [
    {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1},
    {"index": 1, "time": 1_000_000, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 1},
    {"index": 2, "time": 2_000_000, "process": 1, "type": "invoke", "f": "read", "key": "x", "value": None},
    {"index": 3, "time": 3_000_000, "process": 1, "type": "ok", "f": "read", "key": "x", "value": 1},
    {"index": 4, "time": 4_000_000, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 2},
    {"index": 5, "time": 5_000_000, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 2},
]


CASES = {"synth": _case_synth, "spark": _case_spark, "reference": _case_reference, "wgl": _case_wgl, "cli": _case_cli}


def _run_case_here(case: dict[str, Any]) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    started = time.monotonic()
    measured = CASES[case["kind"]](case)
    measured["wall_total_s"] = time.monotonic() - started
    measured.update(_usage())
    print("RESULT " + json.dumps(measured), flush=True)


# ---------------------------------------------------------------------------
# The driver.


def _run_case(case: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any] | None:
    """Run one case in a fresh process; None if it ran out of time."""
    command = [sys.executable, "-m", "bench.checker_bench", "--case", json.dumps(case)]
    try:
        completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"case {case['kind']} failed (exit {completed.returncode}):\n{completed.stderr[-3000:]}")


def _say(text: str) -> None:
    print(text, flush=True)


def _fmt_usage(result: dict[str, Any]) -> str:
    return (
        f"cpu driver {result['cpu_driver_s']:.1f} s + children {result['cpu_children_s']:.1f} s; "
        f"peak RSS driver {result['peak_rss_driver_mb']:.0f} MB, largest child {result['peak_rss_largest_child_mb']:.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (``bench.run_all`` calls this with ``["--quick"]``
    or ``[]``); returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m bench.checker_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (minutes, not tens of minutes)")
    parser.add_argument("--work-dir", type=Path, default=None, help="where datasets go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the datasets")
    parser.add_argument("--json-out", type=Path, default=None, help="also write every measurement here")
    parser.add_argument("--reference-timeout-s", type=float, default=600.0)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.case:
        _run_case_here(json.loads(arguments.case))
        return 0

    tier1_sizes = [100_000, 1_000_000] if arguments.quick else [1_000_000, 10_000_000]
    tier2_ops, tier2_keys = (100_000, 1_000) if arguments.quick else (1_000_000, 10_000)
    reference_sizes = [2_000, 10_000] if arguments.quick else [2_000, 10_000, 50_000]
    work = arguments.work_dir or Path(tempfile.mkdtemp(prefix="checker-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"quick": arguments.quick, "master": MASTER, "cpus": os.cpu_count()}
    _say(f"checker benchmark ({'quick' if arguments.quick else 'full'} sizes), datasets in {work}, Spark master {MASTER}")
    try:
        # Small histories, end to end.
        three = work / "three-operations.jsonl"
        three.write_text("".join(json.dumps(event) + "\n" for event in THREE_OPERATION_HISTORY))
        five_thousand = work / "small-5000"
        made = _run_case({"kind": "synth", "directory": str(five_thousand), "ops": 5_000, "keys": 10,
                          "processes": 10, "format": "jsonl"})
        report["small"] = {}
        for label, path, operations in (("3 ops", three, 3), ("5,000 ops", five_thousand, made["operations"])):
            result = _run_case({"kind": "cli", "paths": [str(path)], "spark_log": str(work / "small-spark.log")})
            report["small"][label] = result
            _say(
                f"small history, {operations:,} ops, `jepsen-like check` end to end: {result['wall_s']:.1f} s wall "
                f"(exit {result['exit_code']}, {result['stderr_chars']} characters on stderr)"
            )

        # Tier 1.
        report["tier1"] = {}
        for size in tier1_sizes:
            directory = work / f"tier1-{size}"
            made = _run_case({"kind": "synth", "directory": str(directory), "ops": size, "keys": 1000, "processes": 20})
            result = _run_case({"kind": "spark", "paths": [str(directory)], "linearizability": False})
            report["tier1"][size] = {"synth": made, "spark": result}
            _say(
                f"tier 1, {size:>10,} ops ({made['events']:,} events, Parquet): check {result['check_s']:.1f} s "
                f"(+ session {result['session_s']:.1f} s) {result['phases_s']}; {_fmt_usage(result)}; "
                f"verdict {'valid' if result['valid'] else 'INVALID'}"
            )
        small, big = (report["tier1"][size]["spark"] for size in tier1_sizes)
        growth = {
            "size": tier1_sizes[1] / tier1_sizes[0],
            "check_wall": big["check_s"] / small["check_s"],
            "cpu_children": big["cpu_children_s"] / max(small["cpu_children_s"], 1e-9),
            "peak_rss_child": big["peak_rss_largest_child_mb"] / max(small["peak_rss_largest_child_mb"], 1e-9),
        }
        report["tier1_growth"] = growth
        _say(
            f"tier 1 growth {tier1_sizes[0]:,} -> {tier1_sizes[1]:,} ops (x{growth['size']:.0f}): wall x{growth['check_wall']:.1f}, "
            f"children CPU x{growth['cpu_children']:.1f}, peak child RSS x{growth['peak_rss_child']:.1f}"
        )

        # Tier 2.
        directory = work / f"tier2-{tier2_ops}"
        made = _run_case({"kind": "synth", "directory": str(directory), "ops": tier2_ops, "keys": tier2_keys, "processes": 20})
        result = _run_case({"kind": "spark", "paths": [str(directory)], "linearizability": True})
        report["tier2"] = {"ops": tier2_ops, "keys": tier2_keys, "synth": made, "spark": result}
        _say(
            f"tier 1+2, {tier2_ops:,} ops over {tier2_keys:,} keys: check {result['check_s']:.1f} s "
            f"(+ session {result['session_s']:.1f} s) {result['phases_s']}, keys {result['keys']}; {_fmt_usage(result)}"
        )

        # The reference checker against the Spark job, on sizes it can finish.
        report["reference"] = {}
        for size in reference_sizes:
            directory = work / f"ref-{size}"
            _run_case({"kind": "synth", "directory": str(directory), "ops": size, "keys": max(10, size // 200),
                       "processes": 10, "format": "jsonl"})
            spark_result = _run_case({"kind": "spark", "paths": [str(directory)]})
            reference = _run_case({"kind": "reference", "paths": [str(directory)]}, timeout_s=arguments.reference_timeout_s)
            report["reference"][size] = {"spark": spark_result, "reference": reference}
            reference_text = (
                f"reference {reference['check_s']:.1f} s ({_fmt_usage(reference)})" if reference
                else f"reference did not finish in {arguments.reference_timeout_s:.0f} s"
            )
            _say(
                f"tiers 1+2, {size:>7,} ops: Spark {spark_result['check_s']:.1f} s (+ session {spark_result['session_s']:.1f} s); "
                f"{reference_text}"
            )

        # The 102 Porcupine etcd histories.
        # The 102 non-empty ones, as Porcupine's figures count them.
        etcd = sorted(str(path) for path in PORCUPINE_JSONL.glob("etcd_*.jsonl") if path.stat().st_size > 0)
        if etcd:
            spark_result = _run_case({"kind": "spark", "paths": etcd})
            wgl = _run_case({"kind": "wgl", "paths": etcd})
            reference = _run_case({"kind": "reference", "paths": etcd}, timeout_s=arguments.reference_timeout_s)
            report["etcd"] = {"spark": spark_result, "wgl": wgl, "reference": reference}
            _say(
                f"etcd ({len(etcd)} histories): Spark job {spark_result['session_s'] + spark_result['check_s']:.1f} s wall = "
                f"session start {spark_result['session_s']:.1f} s + check {spark_result['check_s']:.1f} s "
                f"{spark_result['phases_s']}; verdicts {spark_result['valid']} valid / {spark_result['invalid']} invalid; "
                f"{_fmt_usage(spark_result)}"
            )
            _say(
                f"etcd, pure-Python WGL search only: {wgl['search_s']:.2f} s (+ {wgl['load_s']:.2f} s reading), "
                f"slowest {wgl['slowest']}, verdicts {wgl['verdicts']}"
            )
            if reference:
                _say(f"etcd, reference checker (tiers 1+2, naive search): {reference['check_s']:.1f} s")
            _say("etcd, Porcupine (Go), from shared/reference/checkers.md: 0.6-1.5 s")
        else:
            _say(f"(no Porcupine histories at {PORCUPINE_JSONL}; etcd comparison skipped)")
    finally:
        if arguments.json_out:
            arguments.json_out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        if not arguments.keep and arguments.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
