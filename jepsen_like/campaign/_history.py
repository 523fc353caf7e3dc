"""Recording a history in the project's format (``../shared/design.md``).

Times come from one monotonic clock on the harness host (trio's), as
nanoseconds since the run began: never node clocks. An invoke is stamped
before the request leaves, a completion after the answer arrives.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

import trio

NEMESIS = "nemesis"


class HistoryRecorder:
    """Appends events to ``history.jsonl`` as they happen (a crash of the
    harness still leaves a readable prefix) and keeps counts for the live
    display."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._index = 0
        self._start_s = trio.current_time()
        # The wall clock at the same instant: node event logs are stamped
        # with time.time_ns() and become history-relative with it.
        self.start_wall_ns = time.time_ns()
        # key -> the type of the last completion recorded on it.
        self.last_completion: dict[Any, str] = {}
        # process -> its invoke still waiting for a completion.
        self.pending: dict[Any, dict[str, Any]] = {}
        # Client operations' events by type (nemesis events are not counted).
        self.counts: dict[str, int] = {"invoke": 0, "ok": 0, "fail": 0, "info": 0}
        self.recent_ok_times_s: list[float] = []

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
                self.recent_ok_times_s.append(trio.current_time())
            if type_ == "invoke":
                self.pending[process] = event
            else:
                self.last_completion[key] = type_
                self.pending.pop(process, None)
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def nemesis(self, f: str, value: Any, type_: str = "info") -> None:
        """A fault starting or ending: ``process: "nemesis"``, type info."""
        self.record(NEMESIS, type_, f, None, value)
        self._file.flush()

    def ops_per_second(self, window_s: float = 5.0) -> float:
        now = trio.current_time()
        recent = [t for t in self.recent_ok_times_s if now - t <= window_s]
        self.recent_ok_times_s = recent
        return len(recent) / window_s

    def close(self) -> None:
        self._file.close()
