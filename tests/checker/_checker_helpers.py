"""Small builders for hand-written histories and side files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

MS = 1_000_000  # ns
_SAME = object()


def event(process: int | str, type_: str, f: str, key: str | None, value: Any = None, *, at_ms: float, **extra: Any) -> dict:
    """One history event; ``index`` is assigned when the history is written."""
    record = {"process": process, "type": type_, "f": f, "key": key, "value": value, "time": round(at_ms * MS)}
    record.update({name: field for name, field in extra.items() if field is not None})
    return record


class Case:
    """A history under construction; operations are named so that tests can
    ask for their invoke index once it is written."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.index: dict[str, int] = {}

    def op(
        self,
        name: str,
        process: int,
        f: str,
        key: str | None,
        value: Any = None,
        *,
        start_ms: float,
        end_ms: float | None,
        outcome: str = "ok",
        result: Any = _SAME,
        invoke_extra: Mapping[str, Any] | None = None,
        **completion_extra: Any,
    ) -> "Case":
        """An invoke and (unless ``end_ms`` is None) its completion;
        ``result`` is the completion's value (default: the invoke's)."""
        invoke = event(process, "invoke", f, key, value, at_ms=start_ms, **(invoke_extra or {}))
        invoke["_name"] = name
        self.events.append(invoke)
        if end_ms is not None:
            completion_value = value if result is _SAME else result
            self.events.append(event(process, outcome, f, key, completion_value, at_ms=end_ms, **completion_extra))
        return self

    def raw(self, record: dict) -> "Case":
        self.events.append(record)
        return self

    def write(self, path: Path) -> Path:
        """Write as JSON lines, indexed in time order (stable), and record
        each named operation's invoke index."""
        ordered = sorted(self.events, key=lambda e: e["time"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as handle:
            for index, record in enumerate(ordered):
                record = dict(record)
                name = record.pop("_name", None)
                if name is not None:
                    self.index[name] = index
                handle.write(json.dumps({"index": index, **record}) + "\n")
        return path


def write_records(path: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(dict(record)) + "\n")
    return path


def write_campaign(
    directory: Path,
    case: Case,
    *,
    meta: Mapping[str, Any] | None = None,
    node_events: Iterable[Mapping[str, Any]] = (),
    log_dumps: Iterable[Mapping[str, Any]] = (),
) -> Path:
    """A campaign directory: history.jsonl, and the other files if given."""
    case.write(directory / "history.jsonl")
    if meta is not None:
        (directory / "meta.json").write_text(json.dumps(meta))
    node_events = list(node_events)
    if node_events:
        write_records(directory / "node-events.jsonl", node_events)
    log_dumps = list(log_dumps)
    if log_dumps:
        write_records(directory / "log-dumps.jsonl", log_dumps)
    return directory


def comparable(result: Mapping[str, Any]) -> dict:
    """A results dict without what may legitimately differ between the Spark
    job and the reference checker: the checker's name, search statistics,
    the linearizability witnesses' illustration (only the failing op is
    defined the same way), and keys the Spark job left unchecked once a
    history was refuted (compare with ``all_keys=True``)."""
    clean = json.loads(json.dumps(result))
    clean.pop("checker", None)
    lin = clean["checks"].get("linearizability", {})
    for name in ("budget_steps", "budget_states", "budget_ms"):
        lin.pop(name, None)
    lin.pop("unknown_keys", None)
    lin["witnesses"] = sorted(
        [[w["key"], w["ops"], (w.get("op") or {}).get("index")] for w in lin.get("witnesses", [])],
        key=lambda item: (str(item[0]), item[2] if item[2] is not None else -1),
    )
    return clean


def explosive_history(path: Path, *, writers: int = 60, calm_keys: int = 3) -> Path:
    """A history with one key no search can decide, and ``calm_keys`` keys
    any search decides at once (a write then a read of it, each).

    The key ``hot``: ``writers`` concurrent writes of 1, then a cas from 2
    that succeeded. Nothing ever wrote 2, so it is not linearizable, but the
    search must try every subset of the writes first: 2^writers states,
    more than any machine explores before the sun goes out. Time and the
    deadline stop it on any machine, and a state budget at a known count.
    No read, so no tier-1 check has anything to say about it: only the
    linearizability check can decide the history, which is unknown.
    """
    case = Case()
    for writer in range(writers):
        case.op(f"w{writer}", writer, "write", "hot", 1, start_ms=0, end_ms=10)
    case.op("cas", writers, "cas", "hot", [2, 3], start_ms=20, end_ms=30)
    for number in range(calm_keys):
        key = f"calm{number}"
        case.op(f"{key}-write", writers + 1, "write", key, number, start_ms=40 + 4 * number, end_ms=41 + 4 * number)
        case.op(f"{key}-read", writers + 1, "read", key, None, start_ms=42 + 4 * number, end_ms=43 + 4 * number,
                result=number)
    return case.write(path)
