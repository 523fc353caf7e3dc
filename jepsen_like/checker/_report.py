"""Results: their shape, the history verdict, results files and the summary.

A results file is one JSON object per history::

    {"history": "etcd_000", "path": "...", "model": "register", "checker": "spark",
     "valid": false,                       # true / false / "unknown"
     "stats": {...},                       # what was read
     "checks": {"stale-read": {"status": "pass", "count": 0, "witnesses": []},
                ...,
                "linearizability": {"status": "fail", "count": 1, "witnesses": [...],
                                    "keys": {...}, "unknown_keys": [...], "budget_steps": 50000000,
                                    "budget_states": 4000000, "budget_ms": 600000}},
     "staleness": {"reads": 26, "bounds_ms": {...}, "by_mode": [...], "by_node": [...], "by_window": [...]}}

``staleness`` holds figures, not a verdict: how far behind each ok read was,
summarized per read mode, node and fault window (``_staleness.summarize``).

``status`` is ``pass`` (looked, found nothing), ``fail`` (found ``count``
anomalies; ``witnesses`` lists the first ones by history index, with the exact
operations), ``skipped`` (the input has nothing this check can look at;
``reason`` says what is missing) or ``unknown`` (a key ran out of its budget:
``unknown_keys`` says which limit and what was explored; or the check's
deadline passed before this check decided: ``reason`` says so). ``valid`` is false if any check fails, else "unknown" if
any check is unknown, else true: ``unknown`` is never a pass.
``nothing_to_check`` is true when every check was skipped (an empty history,
or one with only nemesis events): such a history is trivially valid, as
Porcupine and Knossos say, but it proves nothing, and the command line says
so (and exits 4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jepsen_like.checker._wgl import KeyBudget, deadline_reason

PASS = "pass"
FAIL = "fail"
SKIPPED = "skipped"
UNKNOWN = "unknown"
# What the summary says of a history in which no check found anything to look at.
NOTHING_TO_CHECK = "nothing to check"

# Every check, in the order results and the summary list them.
CHECK_NAMES = (
    "stale-read",
    "non-monotonic-read-process",
    "non-monotonic-read-broker",
    "garbage-read",
    "aborted-read",
    "future-read",
    "lost-write",
    "split-brain",
    "forked-log",
    "duplicated-write",
    "broker-epoch-regression",
    "stale-broker-epoch",
    "fenced-broker-read",
    "linearizability",
)
TIER1_CHECK_NAMES = CHECK_NAMES[:-1]

DEFAULT_MAX_WITNESSES = 20

# Input counts both checkers report in ``stats``; they decide which checks
# have anything to look at.
INPUT_COUNTS = (
    "ok_reads",
    "ok_reads_with_offset",
    "ok_broker_reads",
    "ok_broker_reads_with_offset",
    "ok_register_reads",
    "ok_final_reads",
    "broker_requests",
    "role_events",
    "broker_registrations",
    "broker_state_events",
    "log_dump_records",
    "tier2_operations",
)


def skip_reasons(counts: Mapping[str, int]) -> dict[str, str | None]:
    """Why each check has nothing to look at in a history (None: it has)."""

    def unless(condition: int | bool, reason: str) -> str | None:
        return None if condition else reason

    return {
        "stale-read": unless(counts["ok_reads"], "no ok reads"),
        "non-monotonic-read-process": unless(counts["ok_reads_with_offset"], "no ok reads carry an offset"),
        "non-monotonic-read-broker": unless(counts["ok_broker_reads_with_offset"], "no ok broker reads with node and offset"),
        "garbage-read": unless(counts["ok_register_reads"], "no ok reads of keys without appends"),
        "aborted-read": unless(counts["ok_register_reads"], "no ok reads of keys without appends"),
        "future-read": unless(counts["ok_register_reads"], "no ok reads of keys without appends"),
        "lost-write": unless(counts["ok_final_reads"] or counts["log_dump_records"], "no final reads and no log dumps"),
        "split-brain": unless(counts["role_events"], "no role events in node event logs"),
        "forked-log": unless(counts["log_dump_records"], "no log dumps"),
        "duplicated-write": unless(counts["log_dump_records"], "no log dumps"),
        "broker-epoch-regression": unless(counts["broker_registrations"], "no broker registrations in node event logs"),
        "stale-broker-epoch": unless(
            counts["broker_registrations"] and counts["broker_requests"],
            "needs broker registrations and accepted requests carrying a broker epoch",
        ),
        "fenced-broker-read": unless(
            counts["broker_state_events"] and counts["ok_broker_reads"], "needs broker_state events and broker reads"
        ),
        "linearizability": unless(counts["tier2_operations"], "no operations the model checks"),
    }


def skipped(reason: str) -> dict[str, Any]:
    return {"status": SKIPPED, "count": 0, "witnesses": [], "reason": reason}


def tier1_check(anomalies: Sequence[tuple[int, dict[str, Any]]], total: int | None, max_witnesses: int) -> dict[str, Any]:
    """A tier-1 check's entry from its anomalies, given as
    ``(order key, witness)`` pairs; ``total`` is the exact count when only the
    first ones were fetched."""
    ordered = sorted(anomalies, key=lambda pair: pair[0])
    count = len(ordered) if total is None else total
    return {
        "status": FAIL if count else PASS,
        "count": count,
        "witnesses": [witness for _, witness in ordered[:max_witnesses]],
    }


def linearizability_check(
    key_results: Sequence[Mapping[str, Any]], limits: KeyBudget, max_witnesses: int
) -> dict[str, Any]:
    """The linearizability entry from per-key results (dicts with ``key``,
    ``verdict``, ``ops``, ``steps``, ``seconds``, ``witness``, and for
    unknown keys ``reason``, ``budget``, ``states``), searched within
    ``limits``."""
    counts = {"total": len(key_results), "linearizable": 0, "not-linearizable": 0, "unknown": 0}
    witnesses = []
    unknown_keys = []
    for result in sorted(key_results, key=lambda r: (r["ops"], "" if r["key"] is None else r["key"])):
        counts[result["verdict"]] += 1
        if result["verdict"] == "not-linearizable":
            witnesses.append({"key": result["key"], "ops": result["ops"], **(result["witness"] or {})})
        elif result["verdict"] == "unknown":
            unknown_keys.append(
                {
                    "key": result["key"], "ops": result["ops"], "reason": result.get("reason"),
                    "budget": result.get("budget"), "steps": result.get("steps"), "states": result.get("states"),
                }
            )
    if counts["not-linearizable"]:
        status = FAIL
    elif counts["unknown"]:
        status = UNKNOWN
    else:
        status = PASS
    witnesses.sort(key=lambda w: (w["op"] or {}).get("complete_index", -1) if w.get("op") else -1)
    return {
        "status": status,
        "count": counts["not-linearizable"],
        "witnesses": witnesses[:max_witnesses],
        "keys": counts,
        "unknown_keys": unknown_keys[:max_witnesses],
        "budget_steps": limits.budget_steps,
        "budget_states": limits.budget_states,
        "budget_ms": limits.budget_ms,
    }


def deadline_check(what: str) -> dict[str, Any]:
    """The entry of a check the check's deadline stopped before it decided."""
    return {"status": UNKNOWN, "count": 0, "witnesses": [], "reason": deadline_reason(what)}


def history_verdict(checks: Mapping[str, Mapping[str, Any]]) -> bool | str:
    """false if any check failed, "unknown" if any is unknown, else true."""
    statuses = {check["status"] for check in checks.values()}
    if FAIL in statuses:
        return False
    if UNKNOWN in statuses:
        return UNKNOWN
    return True


@dataclass(frozen=True, slots=True)
class HistoryResult:
    """The checker's findings for one history (see the module docstring)."""

    history: str
    path: str
    model: str
    checker: str
    stats: Mapping[str, Any]
    checks: Mapping[str, Mapping[str, Any]]
    # How far behind the reads were (docs/checker.md, "Staleness"): figures,
    # not a check; None only where a result is made by hand.
    staleness: Mapping[str, Any] | None = None

    @property
    def valid(self) -> bool | str:
        return history_verdict(self.checks)

    @property
    def nothing_to_check(self) -> bool:
        """Every check was skipped: the history had nothing any check looks at."""
        return all(check["status"] == SKIPPED for check in self.checks.values())

    def failed_checks(self) -> list[str]:
        return [name for name in CHECK_NAMES if self.checks.get(name, {}).get("status") == FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "history": self.history,
            "path": self.path,
            "model": self.model,
            "checker": self.checker,
            "valid": self.valid,
            "nothing_to_check": self.nothing_to_check,
            "stats": dict(self.stats),
            "checks": {name: dict(self.checks[name]) for name in CHECK_NAMES if name in self.checks},
            **({"staleness": self.staleness} if self.staleness is not None else {}),
        }


def write_results(results: Sequence[HistoryResult], out: str | Path) -> list[Path]:
    """Write results: with one history ``out`` is its results file; with
    several, ``out`` is a directory that receives ``<history name>.json`` each.
    Returns the files written.

    Raises ``OSError`` when the files cannot be written, and
    ``NotADirectoryError`` when several histories meet an ``out`` that is a file.
    """
    out = Path(out)
    if len(results) == 1 and not out.is_dir():
        out.parent.mkdir(parents=True, exist_ok=True)
        targets = [(results[0], out)]
    else:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(f"--out {out} is a file, but {len(results)} histories need a directory")
        out.mkdir(parents=True, exist_ok=True)
        targets = [(result, out / f"{result.history}.json") for result in results]
    written = []
    for result, path in targets:
        path.write_text(json.dumps(result.to_dict(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
        written.append(path)
    return written


def describe_witness(check: str, witness: Mapping[str, Any]) -> str:
    """One line about one witness, for the summary."""

    def op(o: Mapping[str, Any] | None) -> str:
        if not o:
            return "?"
        value = o.get("value", o.get("invoke_value"))
        text = f"#{o['index']} p{o['process']} {o['f']}"
        if "key" in o:
            text += f" {o['key']}"
        text += f" {json.dumps(value)[:40]} ({o['type']})"
        if "offset" in o:
            text += f" @offset {o['offset']}"
        return text

    if check == "linearizability" and "lower" in witness:  # the counter's bounds
        return f"key {witness.get('key')}: {op(witness.get('op'))} is outside [{witness['lower']}, {witness['upper']}]"
    if check == "linearizability":
        return f"key {witness.get('key')}: {op(witness.get('op'))} cannot be linearized"
    for primary in ("read", "write", "request", "registration"):
        if primary in witness and isinstance(witness[primary], Mapping) and "index" in witness[primary]:
            rest = {name: value for name, value in witness.items() if name != primary}
            extra = ""
            for name in ("missed_write", "earlier_read", "fenced_since", "newer_registration", "earlier_registration", "final_read"):
                if name in rest and rest[name]:
                    other = rest[name]
                    extra = f"; {name.replace('_', ' ')}: " + (op(other) if "process" in other else json.dumps(other)[:80])
                    break
            return op(witness[primary]) + extra
        if primary in witness and isinstance(witness[primary], Mapping):
            return json.dumps(witness)[:120]
    return json.dumps(witness, sort_keys=True)[:120]


def unknown_lines(result: HistoryResult, keys_shown: int = 3) -> list[str]:
    """Why a history is unknown, for the summary: each unknown check's
    reason, and the first unknown keys' (which budget, what was explored)."""
    lines = []
    by_reason: dict[str, list[str]] = {}  # checks unknown as a whole (the deadline), grouped
    for name in CHECK_NAMES:
        check = result.checks.get(name, {})
        if check.get("status") != UNKNOWN:
            continue
        unknown_keys = check.get("unknown_keys") or []
        if not unknown_keys:
            by_reason.setdefault(str(check.get("reason")), []).append(name)
        for entry in unknown_keys[:keys_shown]:
            lines.append(f"{name}: key {entry['key']} ({entry['ops']} ops) unknown: {entry['reason']}")
        hidden = check.get("keys", {}).get("unknown", 0) - min(keys_shown, len(unknown_keys))
        if unknown_keys and hidden > 0:
            lines.append(f"{name}: and {hidden} more unknown keys (see the results file)")
    lines += [f"{', '.join(names)}: unknown: {reason}" for reason, names in by_reason.items()]
    return lines


def print_summary(results: Sequence[HistoryResult], *, seconds: float | None = None, console: Any = None) -> None:
    """Print one row per history and, for invalid ones, the first witness of
    each failed check."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title="jepsen-like check", show_lines=False)
    for column in ("history", "valid", "ops", "failed checks", "keys lin/not/unk"):
        table.add_column(column)
    for result in results:
        keys = result.checks.get("linearizability", {}).get("keys")
        keys_text = f"{keys['linearizable']}/{keys['not-linearizable']}/{keys['unknown']}" if keys else "-"
        failed = ", ".join(f"{name}×{result.checks[name]['count']}" for name in result.failed_checks())
        style = "yellow" if result.nothing_to_check else {True: "green", False: "red"}.get(result.valid, "yellow")  # type: ignore[arg-type]
        verdict = NOTHING_TO_CHECK if result.nothing_to_check else json.dumps(result.valid)
        table.add_row(
            result.history,
            f"[{style}]{verdict}[/{style}]",
            str(result.stats.get("operations", "")),
            failed or "-",
            keys_text,
        )
    console.print(table)
    for result in results:
        for name in result.failed_checks():
            witnesses = result.checks[name]["witnesses"]
            if witnesses:
                console.print(f"[red]{result.history}[/red] {name}: {describe_witness(name, witnesses[0])}", highlight=False)
        if result.valid == UNKNOWN:
            for line in unknown_lines(result):
                console.print(f"[yellow]{result.history}[/yellow] {line}", highlight=False)
    invalid = sum(1 for r in results if r.valid is False)
    unknown = sum(1 for r in results if r.valid == UNKNOWN)
    empty = sum(1 for r in results if r.nothing_to_check)
    line = (
        f"{len(results)} histories: {len(results) - invalid - unknown - empty} valid, {invalid} invalid, {unknown} unknown"
    )
    if empty:
        line += f", {empty} with nothing to check (no client operations, node events or log dumps)"
    if seconds is not None:
        line += f" ({seconds:.1f} s)"
    console.print(line, highlight=False)


# Exit codes of ``jepsen-like check`` (2, bad usage or input, is the CLI's).
EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 3
EXIT_NOTHING_TO_CHECK = 4


def exit_code(results: Iterable[HistoryResult]) -> int:
    """0 when every history is valid, 1 when any is invalid, 3 when none is
    invalid but some are unknown, 4 when none is invalid or unknown but some
    had nothing to check. (2 is click's: bad usage or input.)"""
    results = list(results)
    verdicts = [result.valid for result in results]
    if any(verdict is False for verdict in verdicts):
        return EXIT_INVALID
    if any(verdict == UNKNOWN for verdict in verdicts):
        return EXIT_UNKNOWN
    if any(result.nothing_to_check for result in results):
        return EXIT_NOTHING_TO_CHECK
    return EXIT_VALID
