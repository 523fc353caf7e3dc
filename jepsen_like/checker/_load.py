"""Finding histories on disk, reading their meta, and (for the pure-Python
path) reading and pairing their events.

Layouts (docs/checker.md, "Inputs"):

- a history file: ``NAME.jsonl``, ``NAME.parquet`` (a Parquet file or a
  Spark-written Parquet directory) or ``NAME.edn`` (Jepsen's, see ``_edn``),
  with an optional sidecar ``NAME.meta.json``; a file named on its own may
  be read as another format than its name says (``--format``);
- a campaign directory: ``history.jsonl``, ``history.parquet`` or
  ``history.edn`` (a Jepsen store directory is one; Parquet, then JSON lines,
  is used when several are present: they are the same history), and
  optionally ``meta.json``, ``node-events.jsonl`` and/or ``events/*.jsonl``,
  ``log-dumps.jsonl`` and/or ``dumps/*.jsonl``; its name is the directory's;
- any other directory: every history file directly in it, and every campaign
  directory directly in it, in name order.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from jepsen_like.checker._edn import iter_edn_events
from jepsen_like.checker._errors import (
    NUMBER_CHARS_MAX,
    VALUE_NESTING_MAX,
    HistoryFormatError,
    checked_float,
    checked_int,
    nesting_error,
    nests_deeper_than,
    too_deep_field,
)
from jepsen_like.checker._model_catalog import MODEL_DEFAULT, MODEL_NAMES
from jepsen_like.checker._models import (
    INFO,
    KV_OPERATION_NAMES,
    OPTIONAL_FIELDS,
    READ_MODES,
    Operation,
    canonical_json,
    merge_optional_fields,
)

EVENT_TYPES = ("invoke", "ok", "fail", "info")
COMPLETION_TYPES = ("ok", "fail", "info")
NEMESIS = "nemesis"
HISTORY_SUFFIXES = (".jsonl", ".parquet", ".edn")
HISTORY_FORMATS = tuple(suffix.lstrip(".") for suffix in HISTORY_SUFFIXES)
CAMPAIGN_HISTORY_NAMES = ("history.parquet", "history.jsonl", "history.edn")
# Side files are JSON lines or Parquet only.
SIDE_FILE_SUFFIXES = (".jsonl", ".parquet")
OFFSET_SCOPES = ("log", "key")
# The design's default: a leader resigns after 1.5 x fetch timeout without
# hearing from a majority (KAFKA-15489's fix).
DEFAULT_CHECK_QUORUM_FACTOR = 1.5

NODE_EVENT_KINDS = ("role", "broker_registration", "broker_state", "broker_request")
BROKER_STATES = ("offline", "fenced", "online", "stopping")
# Fields each node-event kind must carry (besides time, node, kind).
_NODE_EVENT_REQUIRED = {
    "role": ("epoch", "role"),
    "broker_registration": ("broker_id", "broker_epoch"),
    "broker_state": ("broker_id", "state"),
    "broker_request": ("broker_id", "broker_epoch", "accepted"),
}
LOG_DUMP_REQUIRED = ("node", "offset", "epoch", "record_hash", "hwm")

_META_FIELDS = {
    "model": str,
    "check_quorum_factor": (int, float),
    "fetch_timeout_ms": (int, float),
    "staleness_bound_ms": (int, float),
    "offset_scope": str,
}


@dataclass(frozen=True, slots=True)
class HistoryMeta:
    """What a history declares about itself (``meta.json`` / ``NAME.meta.json``).

    ``leader_local_bound_ms`` is ``check_quorum_factor × fetch_timeout_ms``:
    a leader-local read may miss only writes acknowledged less than that long
    before it was invoked. ``staleness_bound_ms`` is the same for broker reads.
    ``offset_scope`` says whether ``offset`` values are positions in one log
    (``log``, the default) or per-key versions (``key``); it decides whether
    the monotonic-read checks compare offsets across keys.
    """

    model: str | None = None
    check_quorum_factor: float = DEFAULT_CHECK_QUORUM_FACTOR
    fetch_timeout_ms: float | None = None
    staleness_bound_ms: float | None = None
    offset_scope: str = "log"
    # The model's initial state (any JSON value, null included), when not
    # the model's own; --initial-value wins over it.
    initial_value: Any = MODEL_DEFAULT
    # Values are Jepsen's independent tuples [key value] (jepsen.independent):
    # each key is its own object (split_independent).
    independent: bool = False

    @property
    def leader_local_bound_ms(self) -> float | None:
        if self.fetch_timeout_ms is None:
            return None
        return self.check_quorum_factor * self.fetch_timeout_ms


@dataclass(frozen=True, slots=True)
class HistorySource:
    """One history to check and the side files that go with it."""

    name: str
    path: Path
    file_format: str  # "jsonl", "parquet" or "edn"
    meta: HistoryMeta = field(default_factory=HistoryMeta)
    node_event_paths: tuple[Path, ...] = ()
    log_dump_paths: tuple[Path, ...] = ()


def read_meta(path: Path) -> HistoryMeta:
    """Read a meta file. Fields other than the checker's are allowed (a
    campaign's meta.json also records its seed, faults, ...) and not used.

    Raises :class:`HistoryFormatError` for unreadable JSON or a field of the
    wrong type or value.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HistoryFormatError(f"{path}: cannot read meta: {error}") from None
    except RecursionError:
        raise nesting_error(f"{path}: cannot read meta", "a field") from None
    if not isinstance(raw, dict):
        raise HistoryFormatError(f"{path}: meta must be a JSON object")
    values: dict[str, Any] = {}
    for name, expected_type in _META_FIELDS.items():
        if name not in raw or raw[name] is None:
            continue
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, expected_type):
            raise HistoryFormatError(f"{path}: meta field {name!r} has the wrong type: {value!r}")
        if isinstance(value, (int, float)) and (value < 0 or not math.isfinite(value)):
            raise HistoryFormatError(f"{path}: meta field {name!r} must be a finite number >= 0: {value!r}")
        values[name] = value
    if values.get("offset_scope", "log") not in OFFSET_SCOPES:
        raise HistoryFormatError(f"{path}: offset_scope must be one of {OFFSET_SCOPES}")
    if "model" in values and values["model"] not in MODEL_NAMES:
        raise HistoryFormatError(f"{path}: unknown model {values['model']!r}")
    if "initial_value" in raw:  # any JSON value; null is Jepsen's nil
        values["initial_value"] = raw["initial_value"]
    if raw.get("independent") is not None:
        if not isinstance(raw["independent"], bool):
            raise HistoryFormatError(f"{path}: meta field 'independent' must be true or false: {raw['independent']!r}")
        values["independent"] = raw["independent"]
    return HistoryMeta(**values)


def _history_name(path: Path) -> str:
    name = path.name
    for suffix in HISTORY_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _is_history_file(path: Path) -> bool:
    if path.name.endswith(".node-events.jsonl") or path.name.endswith(".log-dumps.jsonl"):
        return False
    if path.suffix in (".jsonl", ".edn"):
        return path.is_file()
    return path.suffix == ".parquet"  # a file, or a directory Spark wrote


def _is_campaign(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in CAMPAIGN_HISTORY_NAMES)


def _side_files(directory: Path, stem: str, subdirectory: str) -> list[Path]:
    """``STEM.jsonl`` / ``STEM.parquet`` and ``SUBDIRECTORY/*.jsonl|*.parquet``."""
    found = [directory / f"{stem}{suffix}" for suffix in SIDE_FILE_SUFFIXES if (directory / f"{stem}{suffix}").exists()]
    if (directory / subdirectory).is_dir():
        found += sorted(
            path for path in (directory / subdirectory).iterdir() if path.suffix in SIDE_FILE_SUFFIXES
        )
    return found


def _campaign_source(directory: Path) -> HistorySource:
    history = next(directory / name for name in CAMPAIGN_HISTORY_NAMES if (directory / name).exists())
    meta_path = directory / "meta.json"
    meta = read_meta(meta_path) if meta_path.exists() else HistoryMeta()
    events = _side_files(directory, "node-events", "events")
    dumps = _side_files(directory, "log-dumps", "dumps")
    return HistorySource(
        name=directory.resolve().name,
        path=history,
        file_format=history.suffix.lstrip("."),
        meta=meta,
        node_event_paths=tuple(events),
        log_dump_paths=tuple(dumps),
    )


def _file_source(path: Path, file_format: str | None = None) -> HistorySource:
    name = _history_name(path)
    meta_path = path.with_name(f"{name}.meta.json")
    meta = read_meta(meta_path) if meta_path.exists() else HistoryMeta()
    return HistorySource(name=name, path=path, file_format=file_format or path.suffix.lstrip("."), meta=meta)


def discover_histories(
    paths: Iterable[str | Path], *, history_format: str | None = None, independent: bool = False
) -> list[HistorySource]:
    """The histories named by ``paths`` (files, directories of histories, or
    campaign directories), in order. ``history_format`` (``jsonl``,
    ``parquet`` or ``edn``) is the format of the files named in ``paths``
    whatever their names say; files found in directories go by their names.
    ``independent`` marks every history's values as Jepsen's independent
    tuples (as ``"independent": true`` in a history's meta does).

    Raises :class:`HistoryFormatError` when a path does not exist, holds no
    history, or two histories would share a name (results files are named
    after histories), and ``ValueError`` for an unknown ``history_format``.
    """
    if history_format is not None and history_format not in HISTORY_FORMATS:
        raise ValueError(f"unknown history format {history_format!r}; choose one of {', '.join(HISTORY_FORMATS)}")
    sources: list[HistorySource] = []
    for raw_path in paths:
        path = Path(raw_path)
        if not path.exists():
            raise HistoryFormatError(f"{path}: no such file or directory")
        if _is_campaign(path):
            sources.append(_campaign_source(path))
        elif path.is_dir() and path.suffix != ".parquet":
            found = [
                _campaign_source(child) if _is_campaign(child) else _file_source(child)
                for child in sorted(path.iterdir())
                if _is_campaign(child) or _is_history_file(child)
            ]
            if not found:
                raise HistoryFormatError(f"{path}: no histories (*.jsonl, *.parquet, *.edn or campaign directories) in it")
            sources.extend(found)
        elif _is_history_file(path) or (history_format is not None and path.is_file()):
            sources.append(_file_source(path, history_format))
        else:
            raise HistoryFormatError(f"{path}: not a history (expected *.jsonl, *.parquet, *.edn or a directory)")
    if independent:
        sources = [replace(source, meta=replace(source.meta, independent=True)) for source in sources]
    seen: dict[str, Path] = {}
    for source in sources:
        if source.name in seen:
            raise HistoryFormatError(
                f"two histories are both named {source.name!r}: {seen[source.name]} and {source.path}"
            )
        seen[source.name] = source.path
    return sources


def model_override_name(model: Any) -> str | None:
    """The name ``--model`` (or a ``model=`` argument) names: the string
    itself, a ``Model``'s name, or None."""
    return model if model is None or isinstance(model, str) else model.name


def resolve_model_name(source: HistorySource, operation_names: Iterable[str], override: str | None) -> str:
    """The model a history is checked against: ``override`` (``--model``),
    else its meta's ``model``, else ``kv`` if it has get/put/append
    operations, else ``register``."""
    if override is not None:
        return override
    if source.meta.model is not None:
        return source.meta.model
    return "kv" if any(name in KV_OPERATION_NAMES for name in operation_names) else "register"


# ---------------------------------------------------------------------------
# Pure-Python reading (the reference checker's path, and small tools).


def _json_loads(text: str) -> Any:
    """``json.loads``, refusing (``ValueError``) a number longer than
    ``NUMBER_CHARS_MAX`` characters as Spark's reader does; only text long
    enough to hold one pays for the checking hooks."""
    if len(text) <= NUMBER_CHARS_MAX:
        return json.loads(text)
    return json.loads(text, parse_int=checked_int, parse_float=checked_float)


# A byte that is not UTF-8, as the surrogateescape error handler reads it.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _open_lines(path: Path) -> Any:
    try:
        # Undecodable bytes are kept (as lone surrogates) to be reported
        # with their line: a strict decoder fails on a whole read-ahead
        # chunk, before the lines it holds have been counted.
        return path.open("r", encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        raise HistoryFormatError(f"{path}: cannot open: {error}") from None


def _json_line(path: Path, line_number: int, line: str) -> dict[str, Any]:
    """One non-blank line's JSON object. Raises :class:`HistoryFormatError`,
    naming the file and line, for a line that is not UTF-8, not JSON, not
    an object, or with a field that nests deeper than ``VALUE_NESTING_MAX``
    levels: a history is input from outside, and none of these is a bug of
    the checker's."""
    undecodable = None if line.isascii() else _NOT_UTF8.search(line)
    if undecodable is not None:
        raise HistoryFormatError(
            f"{path}:{line_number}: not valid UTF-8 (byte 0x{ord(undecodable.group()) - 0xDC00:02x} "
            f"at character {undecodable.start() + 1})"
        )
    try:
        record = _json_loads(line)
    except json.JSONDecodeError as error:
        raise HistoryFormatError(f"{path}:{line_number}: not valid JSON ({error.msg}): {line.strip()[:200]}") from None
    except RecursionError:  # deeper than the decoder's stack, far past the limit
        raise nesting_error(f"{path}:{line_number}", "a field") from None
    except ValueError as error:  # a number past NUMBER_CHARS_MAX
        raise HistoryFormatError(f"{path}:{line_number}: {error}") from None
    if not isinstance(record, dict):
        raise HistoryFormatError(f"{path}:{line_number}: expected a JSON object, got {line.strip()[:200]}")
    too_deep = too_deep_field(record)
    if too_deep is not None:
        raise nesting_error(f"{path}:{line_number}", too_deep)
    return record


def _iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each non-blank line's JSON object, with its line number. Raises
    :class:`HistoryFormatError` for the first malformed line (see
    :func:`_json_line`)."""
    with _open_lines(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                yield line_number, _json_line(path, line_number, line)


_INDEX_FIELD = re.compile(r'"index"\s*:\s*(-?\d+)')


def locate_lines(path: Path, indexes: set[int], raw_lines: set[str]) -> tuple[dict[int, list[int]], dict[str, int]]:
    """Where events are in a JSON-lines file, for error messages: the line
    numbers of the events whose ``index`` is in ``indexes`` (in file order),
    and the first line number of each text in ``raw_lines`` (lines as
    written, without their line break). Reads the file once; used only when
    the Spark job has found something malformed.

    Raises :class:`HistoryFormatError` when the file cannot be opened.
    """
    by_index: dict[int, list[int]] = {}
    by_text: dict[str, int] = {}
    if not indexes and not raw_lines:
        return by_index, by_text
    try:
        handle = path.open("r", encoding="utf-8", errors="replace")
    except OSError as error:
        raise HistoryFormatError(f"{path}: cannot open: {error}") from None
    with handle:
        for line_number, line in enumerate(handle, start=1):
            text = line.rstrip("\r\n")
            if text in raw_lines and text not in by_text:
                by_text[text] = line_number
                continue
            found = _INDEX_FIELD.search(text)
            if found is None or int(found.group(1)) not in indexes:
                continue
            try:  # the first "index" in the text may be inside a value
                record = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(record, dict) and _is_int(record.get("index")) and record["index"] in indexes:
                by_index.setdefault(record["index"], []).append(line_number)
    return by_index, by_text


# The integer fields (index, time, process, offset, epochs) are 64-bit, as
# Spark's reader types them: one past the range is refused on both paths.
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _LONG_MIN <= value <= _LONG_MAX


def _as_text(value: Any) -> str | None:
    """Identifiers (key, node, broker_id, write_id) compare as text, as Spark
    reads them: a JSON string as is, anything else as its JSON text."""
    if value is None or isinstance(value, str):
        return value
    return canonical_json(value)


def _check_event(where: str, record: dict[str, Any]) -> None:
    for name in ("index", "time", "process", "type", "f"):
        if record.get(name) is None:
            raise HistoryFormatError(f"{where}: missing required field {name!r}")
    if not _is_int(record["index"]):
        raise HistoryFormatError(f"{where}: index must be an integer, got {record['index']!r}")
    if not _is_int(record["time"]):
        raise HistoryFormatError(f"{where}: time must be an integer (ns), got {record['time']!r}")
    if record["type"] not in EVENT_TYPES:
        raise HistoryFormatError(f"{where}: type must be one of {', '.join(EVENT_TYPES)}, got {record['type']!r}")
    if not isinstance(record["f"], str):
        raise HistoryFormatError(f"{where}: f must be a string, got {record['f']!r}")
    process = record["process"]
    if process != NEMESIS and not _is_int(process):
        raise HistoryFormatError(f"{where}: process must be an integer or \"nemesis\", got {process!r}")
    mode = record.get("mode")
    if mode is not None and mode not in READ_MODES:
        raise HistoryFormatError(f"{where}: mode must be one of {', '.join(READ_MODES)}, got {mode!r}")
    for name in ("offset", "epoch", "broker_epoch"):
        if record.get(name) is not None and not _is_int(record[name]):
            raise HistoryFormatError(f"{where}: {name} must be an integer, got {record[name]!r}")
    if record.get("final") is not None and not isinstance(record["final"], bool):
        raise HistoryFormatError(f"{where}: final must be true or false, got {record['final']!r}")


def read_history_events(source: HistorySource) -> list[dict[str, Any]]:
    """All events of a history, validated, in index order (an independent
    history's split by :func:`split_independent`).

    Raises :class:`HistoryFormatError` naming the file and line of the first
    malformed event.
    """
    if source.file_format == "edn":
        located: Iterable[tuple[str, dict[str, Any]]] = iter_edn_events(source.path)
    else:
        records = _read_parquet_records(source.path) if source.file_format == "parquet" else _iter_json_lines(source.path)
        located = ((f"{source.path}:{line_number}", record) for line_number, record in records)
    if source.meta.independent:
        located = split_independent(located)
    return history_events(located)


def split_independent(records: Iterable[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events of a Jepsen independent history (``jepsen.independent``: every
    client operation's value is a tuple ``[key value]``, and each key is
    checked as a history of its own) with the tuple split into the event's
    ``key`` and ``value``; nemesis events pass as they are. ``records`` as
    for :func:`history_events`; each is changed in place.

    Raises :class:`HistoryFormatError` naming ``where`` for a client event
    whose value is not a two-element tuple, or that has a ``key`` already.
    """
    for where, record in records:
        if isinstance(record, dict) and record.get("process") != NEMESIS:
            pair = record.get("value")
            if not isinstance(pair, list) or len(pair) != 2:
                raise HistoryFormatError(
                    f"{where}: an independent history's operation values are [key value] tuples, "
                    f"got {canonical_json(pair)[:200]}"
                )
            if record.get("key") is not None:
                raise HistoryFormatError(f"{where}: has a key and an independent [key value] tuple: which is its key?")
            record["key"], record["value"] = pair
        yield where, record


def history_events(records: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Events given as ``(where, record)`` pairs (a history held in memory,
    or a file's lines), validated and normalised as a history file's are,
    in index order. ``record`` is normalised in place.

    Raises :class:`HistoryFormatError` naming ``where`` for the first
    malformed event.
    """
    events: list[dict[str, Any]] = []
    seen_indexes: set[int] = set()
    for where, record in records:
        _check_event(where, record)
        if record["index"] in seen_indexes:
            raise HistoryFormatError(f"{where}: index {record['index']} appears more than once")
        seen_indexes.add(record["index"])
        record["key"] = _as_text(record.get("key"))
        for name in ("node", "broker_id", "write_id"):
            if name in record:
                record[name] = _as_text(record[name])
        if record.get("error") is not None:
            record["error"] = _as_text(record["error"])
        events.append(record)
    events.sort(key=lambda event: event["index"])
    return events


def _read_parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as parquet

    try:
        table = parquet.read_table(path)
    except Exception as error:  # pyarrow raises several types for unreadable files
        raise HistoryFormatError(f"{path}: cannot read Parquet: {error}") from None
    for row_number, row in enumerate(table.to_pylist(), start=1):
        yield row_number, {name: value for name, value in row.items() if value is not None}


def _read_parquet_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for row_number, record in _read_parquet_rows(path):
        if isinstance(record.get("value"), str):
            try:
                record["value"] = _json_loads(record["value"])
            except json.JSONDecodeError as error:
                raise HistoryFormatError(f"{path} row {row_number}: value is not JSON text ({error.msg})") from None
            except RecursionError:
                raise nesting_error(f"{path} row {row_number}") from None
            except ValueError as error:  # a number past NUMBER_CHARS_MAX
                raise HistoryFormatError(f"{path} row {row_number}: value {error}") from None
            if nests_deeper_than(record["value"], VALUE_NESTING_MAX):
                raise nesting_error(f"{path} row {row_number}")
        if isinstance(record.get("process"), str) and record["process"] != NEMESIS:
            try:
                record["process"] = int(record["process"])
            except ValueError:
                pass  # reported by the event check
        yield row_number, record


def pair_operations(source: HistorySource, events: list[dict[str, Any]]) -> tuple[list[Operation], int]:
    """Pair each invoke with its process's next event; return the operations
    in invoke order and the number of nemesis events.

    Raises :class:`HistoryFormatError` for a completion without an invoke, a
    second invoke while one is open, a completion whose ``f`` or ``key``
    differs from its invoke's, or one that ends before it began.
    """
    open_invokes: dict[int, dict[str, Any]] = {}
    operations: list[Operation] = []
    nemesis_events = 0

    def make(invoke: dict[str, Any], completion: dict[str, Any] | None) -> Operation:
        outcome = completion["type"] if completion is not None else INFO
        return Operation(
            index=invoke["index"],
            process=invoke["process"],
            f=invoke["f"],
            key=invoke["key"],
            outcome=outcome,
            invoke_value=invoke.get("value"),
            value=completion.get("value") if completion is not None else None,
            call_ns=invoke["time"],
            return_ns=completion["time"] if completion is not None and outcome != INFO else None,
            complete_index=completion["index"] if completion is not None else None,
            complete_ns=completion["time"] if completion is not None else None,
            extra=merge_optional_fields(invoke, completion),
        )

    for event in events:
        if event["process"] == NEMESIS:
            nemesis_events += 1
            continue
        where = f"{source.path}: event index {event['index']}"
        process = event["process"]
        if event["type"] == "invoke":
            if process in open_invokes:
                raise HistoryFormatError(
                    f"{where}: process {process} invoked again while its operation at index "
                    f"{open_invokes[process]['index']} had not completed"
                )
            open_invokes[process] = event
            continue
        invoke = open_invokes.pop(process, None)
        if invoke is None:
            raise HistoryFormatError(f"{where}: {event['type']} completion without an invoke for process {process}")
        if invoke["f"] != event["f"] or invoke["key"] != event["key"]:
            raise HistoryFormatError(
                f"{where}: completion ({event['f']} on {event['key']!r}) has a different f or key than its invoke "
                f"at index {invoke['index']} ({invoke['f']} on {invoke['key']!r})"
            )
        if event["time"] < invoke["time"]:
            raise HistoryFormatError(f"{where}: completes at time {event['time']}, before its invoke at {invoke['time']}")
        operations.append(make(invoke, event))
    operations.extend(make(invoke, None) for invoke in open_invokes.values())
    operations.sort(key=lambda op: op.index)
    return operations, nemesis_events


_SIDE_INTEGER_FIELDS = ("epoch", "broker_epoch", "offset", "hwm", "log_start")
# Side-file fields compared as text, as Spark reads them (see _as_text).
_SIDE_TEXT_FIELDS = ("node", "kind", "leader", "broker_id", "write_id", "record_hash")


def _side_record_problem(record: dict[str, Any], *, node_event: bool) -> str | None:
    """What is wrong with one node event (``node_event``) or log-dump
    record, or None. The Spark job checks the same (``_frames._side_errors``)
    and, when it finds something, takes its messages from here."""
    if node_event:
        for name in ("time", "node", "kind"):
            if record.get(name) is None:
                return f"missing required field {name!r}"
        if not _is_int(record["time"]):
            return f"time must be an integer (ns), got {record['time']!r}"
        kind = _as_text(record["kind"])
        for name in _NODE_EVENT_REQUIRED.get(kind, ()):  # type: ignore[arg-type]
            if record.get(name) is None:
                return f"{kind} event without {name!r}"
    else:
        for name in LOG_DUMP_REQUIRED:
            if record.get(name) is None:
                return f"missing required field {name!r}"
    for name in _SIDE_INTEGER_FIELDS:
        if record.get(name) is not None and not _is_int(record[name]):
            return f"{name} must be an integer, got {record[name]!r}"
    if record.get("accepted") is not None and not isinstance(record["accepted"], bool):
        return "accepted must be true or false"
    if node_event and record["kind"] == "broker_state" and record["state"] not in BROKER_STATES:
        return f"state must be one of {', '.join(BROKER_STATES)}, got {record['state']!r}"
    return None


def _side_where(path: Path, number: int) -> str:
    """A side file's line (JSON lines), or row (Parquet, as a Parquet
    history's rows are named)."""
    return f"{path} row {number}" if path.suffix == ".parquet" else f"{path}:{number}"


def _read_side_file(path: Path, *, node_event: bool) -> list[dict[str, Any]]:
    records = []
    rows = _read_parquet_rows(path) if path.suffix == ".parquet" else _iter_json_lines(path)
    for number, record in rows:
        problem = _side_record_problem(record, node_event=node_event)
        if problem is not None:
            raise HistoryFormatError(f"{_side_where(path, number)}: {problem}")
        for name in _SIDE_TEXT_FIELDS:
            if name in record:
                record[name] = _as_text(record[name])
        records.append(record)
    return records


def side_file_errors(path: Path, *, node_event: bool, limit: int) -> list[str]:
    """The first ``limit`` malformed lines (or Parquet rows) of a node-event
    log (``node_event``) or log dump, each as the reference checker reports
    it (``FILE:LINE: what is wrong``), reading past each one. For the Spark
    job's messages: it finds that a side file has malformed records, not
    where they are; this reads the file again, only then."""
    errors: list[str] = []
    if path.suffix == ".parquet":
        try:
            for number, record in _read_parquet_rows(path):
                problem = _side_record_problem(record, node_event=node_event)
                if problem is not None:
                    errors.append(f"{_side_where(path, number)}: {problem}")
                    if len(errors) >= limit:
                        break
        except HistoryFormatError as error:
            errors.append(str(error))
        return errors[:limit]
    try:
        handle = _open_lines(path)
    except HistoryFormatError as error:
        return [str(error)]
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = _json_line(path, number, line)
            except HistoryFormatError as error:
                errors.append(str(error))
            else:
                problem = _side_record_problem(record, node_event=node_event)
                if problem is not None:
                    errors.append(f"{_side_where(path, number)}: {problem}")
            if len(errors) >= limit:
                break
    return errors


def read_node_events(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Node event log records (schema in docs/checker.md). Kinds the checker
    does not use are kept (and counted in results), not rejected.

    Raises :class:`HistoryFormatError` for a malformed line.
    """
    events: list[dict[str, Any]] = []
    for path in paths:
        events.extend(_read_side_file(path, node_event=True))
    return events


def read_log_dumps(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Log dump records (schema in docs/checker.md).

    Raises :class:`HistoryFormatError` for a malformed line.
    """
    records: list[dict[str, Any]] = []
    for path in paths:
        records.extend(_read_side_file(path, node_event=False))
    return records


# Rough sizes of an event in each format, in bytes (Parquet is compressed).
_JSONL_BYTES_PER_EVENT = 100
_PARQUET_BYTES_PER_EVENT = 8
# Inputs of up to this many history events (10,000 operations, two events
# each, and some nemesis events) and side-file records (node events and log
# dumps: a campaign of 10,000 operations has about 15,000) are small inputs:
# the checker starts a JVM tuned for a short life and runs them with the
# settings of one (``_job``).
SMALL_INPUT_EVENTS_MAX = 22_000
SMALL_INPUT_SIDE_RECORDS_MAX = 50_000
# JSON-lines files up to this size are counted line by line (milliseconds);
# larger ones are not small inputs whatever their exact count.
_COUNT_LINES_MAX_BYTES = 32 * 1024 * 1024


def estimated_events(sources: Sequence[HistorySource]) -> int:
    """A rough count of the events (history, node events, log dumps) in
    ``sources``, from file sizes."""
    events = 0
    for source in sources:
        for path in (source.path, *source.node_event_paths, *source.log_dump_paths):
            size = _size_bytes(path)
            events += size // (_PARQUET_BYTES_PER_EVENT if path.suffix == ".parquet" else _JSONL_BYTES_PER_EVENT)
    return events


def is_small_input(sources: Sequence[HistorySource]) -> bool:
    """Whether ``sources`` get the settings of a small input: at most
    :data:`SMALL_INPUT_EVENTS_MAX` history events and
    :data:`SMALL_INPUT_SIDE_RECORDS_MAX` side-file records in all
    (JSON-lines files counted exactly, Parquet estimated from its size)."""
    history_events = side_records = 0
    for source in sources:
        history_events += _events_in(source.path)
        side_records += sum(_events_in(path) for path in (*source.node_event_paths, *source.log_dump_paths))
        if history_events > SMALL_INPUT_EVENTS_MAX or side_records > SMALL_INPUT_SIDE_RECORDS_MAX:
            return False
    return True


def _events_in(path: Path) -> int:
    size = _size_bytes(path)
    if path.suffix != ".jsonl" or size > _COUNT_LINES_MAX_BYTES:
        return size // (_PARQUET_BYTES_PER_EVENT if path.suffix == ".parquet" else _JSONL_BYTES_PER_EVENT)
    lines = 0
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            lines += chunk.count(b"\n")
    return lines


def _size_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(child.stat().st_size for child in path.rglob("*") if child.is_file())
    return path.stat().st_size


__all__ = [
    "HistoryMeta",
    "HistorySource",
    "OPTIONAL_FIELDS",
    "discover_histories",
    "estimated_events",
    "history_events",
    "is_small_input",
    "locate_lines",
    "pair_operations",
    "read_history_events",
    "split_independent",
    "read_log_dumps",
    "read_meta",
    "read_node_events",
    "resolve_model_name",
    "side_file_errors",
]
