"""Recording a history in the project's format (``../shared/design.md``).

Times come from one monotonic clock on the harness host (trio's), as
nanoseconds since the run began: never node clocks. An invoke is stamped
before the request leaves, a completion after the answer arrives.

Two copies of the history are written as events happen (docs/history.md,
"A campaign's history on disk"):

- ``history.jsonl``, one line per event, flushed at every fault: a crash of
  the harness still leaves a readable prefix, and ``--replay``, the report
  and ``jq`` read it;
- Parquet chunks, ``history.parquet/part-NNNNN.parquet``, one every
  ``chunk_events`` events or ``chunk_seconds`` seconds, whichever comes
  first. They are written into ``history.parquet.partial/`` and the
  directory takes its final name when the recorder closes (also on
  Ctrl-C), so the checker never takes the chunks of a harness that died
  without closing for the whole history (it reads ``history.jsonl`` then).

What the recorder keeps in memory does not grow with the run's length: the
events of one chunk, the invokes in flight (one per client process), the
last completion of the most recent keys, and ok counts per second for the
last minute.
"""

from __future__ import annotations

import collections
import json
import math
import time
from pathlib import Path
from typing import Any, TextIO

import trio

NEMESIS = "nemesis"
#: Events in one Parquet chunk at most (about 10 MB of harness memory).
CHUNK_EVENTS = 20_000
#: A chunk is written at least this often while events arrive.
CHUNK_SECONDS = 60.0
#: Keys whose last completion the recorder remembers (the final reads ask
#: right after their own read).
LAST_COMPLETIONS_KEPT = 1024
#: Seconds of ok counts kept for the throughput figure.
THROUGHPUT_WINDOW_MAX_S = 60

# The checker's history columns (jepsen_like/checker, HISTORY_SCHEMA), ``op``
# (the metadata workload's request name) and ``read_offset`` (the offset a
# register read was served at), with Parquet types. The
# value is JSON text, as the checker reads Parquet histories.
_STRING_COLUMNS = ("process", "type", "f", "key", "value", "node", "mode", "write_id", "broker_id", "error", "op")
_INT_COLUMNS = ("index", "time", "offset", "epoch", "broker_epoch", "read_offset")
_BOOL_COLUMNS = ("final",)


def parquet_schema() -> Any:
    """The Arrow schema of every history chunk (one schema for every file,
    so that the chunk directory reads as one table)."""
    import pyarrow as pa

    fields = [pa.field(name, pa.int64()) for name in _INT_COLUMNS]
    fields += [pa.field(name, pa.string()) for name in _STRING_COLUMNS]
    fields += [pa.field(name, pa.bool_()) for name in _BOOL_COLUMNS]
    return pa.schema(fields)


def _column_value(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "value":
        return json.dumps(value, separators=(",", ":"))
    if name in _STRING_COLUMNS:
        if isinstance(value, str):
            return value
        return str(value) if isinstance(value, int) else json.dumps(value)
    if name in _INT_COLUMNS:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, bool) else None


class ParquetChunks:
    """Events buffered and written as numbered Parquet files in one
    directory (``part-00000.parquet``, ...). ``finish()`` writes the rest
    and renames the directory to ``final_path``."""

    def __init__(self, final_path: Path, *, chunk_events: int = CHUNK_EVENTS, chunk_seconds: float = CHUNK_SECONDS) -> None:
        if chunk_events < 1 or not chunk_seconds > 0:
            raise ValueError("chunk_events must be >= 1 and chunk_seconds > 0")
        self.final_path = final_path
        self.directory = final_path.with_name(final_path.name + ".partial")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.chunk_events = chunk_events
        self.chunk_seconds = chunk_seconds
        self.chunks_written = 0
        self._columns: dict[str, list[Any]] = {name: [] for name in parquet_schema().names}
        self._buffered = 0
        self._chunk_started_s = time.monotonic()

    @property
    def buffered(self) -> int:
        """Events waiting for the next chunk."""
        return self._buffered

    def add(self, event: dict[str, Any]) -> None:
        for name, column in self._columns.items():
            column.append(_column_value(name, event.get(name)))
        self._buffered += 1
        if self._buffered >= self.chunk_events or time.monotonic() - self._chunk_started_s >= self.chunk_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the buffered events as the next chunk (nothing if none)."""
        self._chunk_started_s = time.monotonic()
        if not self._buffered:
            return
        import pyarrow as pa
        import pyarrow.parquet as parquet

        table = pa.table(self._columns, schema=parquet_schema())
        path = self.directory / f"part-{self.chunks_written:05d}.parquet"
        parquet.write_table(table, path.with_suffix(".tmp"), compression="zstd")
        path.with_suffix(".tmp").rename(path)  # a reader never sees half a chunk
        self.chunks_written += 1
        for column in self._columns.values():
            column.clear()
        self._buffered = 0

    def finish(self) -> None:
        self.flush()
        if self.final_path.exists():
            raise FileExistsError(f"{self.final_path} exists")
        self.directory.rename(self.final_path)


class HistoryRecorder:
    """Appends events to ``history.jsonl`` and to Parquet chunks as they
    happen, and keeps the counts the live display shows."""

    def __init__(
        self, path: Path, *, parquet: Path | None = None, chunk_events: int = CHUNK_EVENTS, chunk_seconds: float = CHUNK_SECONDS
    ) -> None:
        """``parquet``: where the chunk directory ends up (None: JSON lines
        only). Raises ``ValueError`` for a chunk size below one."""
        self.path = path
        self._file: TextIO = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.chunks = ParquetChunks(parquet, chunk_events=chunk_events, chunk_seconds=chunk_seconds) if parquet is not None else None
        self._index = 0
        self._start_s = trio.current_time()
        # The wall clock at the same instant: node event logs are stamped
        # with time.time_ns() and become history-relative with it.
        self.start_wall_ns = time.time_ns()
        # key -> the type of the last completion recorded on it, for the
        # LAST_COMPLETIONS_KEPT keys completed most recently.
        self.last_completion: collections.OrderedDict[Any, str] = collections.OrderedDict()
        # process -> its invoke still waiting for a completion (a process
        # that ended in info never completes again: at most one per client
        # at a time, as each client takes a fresh process after an info).
        self.pending: dict[Any, dict[str, Any]] = {}
        # Client operations' events by type (nemesis events are not counted).
        self.counts: dict[str, int] = {"invoke": 0, "ok": 0, "fail": 0, "info": 0}
        # (whole second of trio's clock, ok events in it), the newest last.
        self._ok_per_second: collections.deque[list[int]] = collections.deque(maxlen=THROUGHPUT_WINDOW_MAX_S + 1)

    @property
    def events(self) -> int:
        """Events recorded so far."""
        return self._index

    def now_ns(self) -> int:
        return int((trio.current_time() - self._start_s) * 1e9)

    def record(self, process: int | str, type_: str, f: str, key: str | None, value: Any, **extra: Any) -> dict[str, Any]:
        event = {
            "index": self._index,
            "time": self.now_ns(),
            "process": process,
            "type": type_,
            "f": f,
            "key": key,
            "value": value,
        }
        for name, field_value in extra.items():
            if field_value is not None:
                event[name] = field_value
        self._index += 1
        if process != NEMESIS:
            self.counts[type_] = self.counts.get(type_, 0) + 1
            if type_ == "ok":
                self._count_ok(trio.current_time())
            if type_ == "invoke":
                self.pending[process] = event
            else:
                self.last_completion[key] = type_
                self.last_completion.move_to_end(key)
                if len(self.last_completion) > LAST_COMPLETIONS_KEPT:
                    self.last_completion.popitem(last=False)
                self.pending.pop(process, None)
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        if self.chunks is not None:
            self.chunks.add(event)
        return event

    def _count_ok(self, now_s: float) -> None:
        second = math.floor(now_s)
        if self._ok_per_second and self._ok_per_second[-1][0] == second:
            self._ok_per_second[-1][1] += 1
        else:
            self._ok_per_second.append([second, 1])

    def nemesis(self, f: str, value: Any, type_: str = "info") -> None:
        """A fault starting or ending: ``process: "nemesis"``, type info."""
        self.record(NEMESIS, type_, f, None, value)
        self._file.flush()

    def ops_per_second(self, window_s: float = 5.0) -> float:
        """ok completions per second over the last ``window_s`` whole
        seconds (at most ``THROUGHPUT_WINDOW_MAX_S``)."""
        window_s = min(max(window_s, 1.0), float(THROUGHPUT_WINDOW_MAX_S))
        now = math.floor(trio.current_time())
        recent = sum(count for second, count in self._ok_per_second if now - second < window_s)
        return recent / window_s

    def close(self) -> None:
        """Close the JSON lines and write the last Parquet chunk, then give
        the chunk directory its final name."""
        self._file.close()
        if self.chunks is not None:
            self.chunks.finish()
