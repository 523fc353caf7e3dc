"""Stage timestamps for latency analysis (off unless ``PYKRAFT_TRACE_DIR``
is set in the environment).

Each process appends ``(monotonic_ns, stage, key)`` to a list and writes it
to ``$PYKRAFT_TRACE_DIR/<pid>.trace`` at exit. All processes on one machine
share CLOCK_MONOTONIC, so the files of a client and three voters line up;
``python -m bench.latency_breakdown`` reads them. When the variable is not
set, every hook costs one test of ``enabled``.
"""

from __future__ import annotations

import atexit
import os
import time

_directory = os.environ.get("PYKRAFT_TRACE_DIR")
enabled = bool(_directory)
_events: list[tuple[int, str, object]] = []
_now = time.monotonic_ns


def stamp(stage: str, key: object = None) -> None:
    _events.append((_now(), stage, key))


def dump(name: str | None = None) -> None:
    if not enabled or not _events:
        return
    path = os.path.join(_directory or ".", f"{name or os.getpid()}.trace")
    with open(path, "a", encoding="utf-8") as file:
        for when, stage, key in _events:
            file.write(f"{when} {stage} {key}\n")
    _events.clear()


if enabled:
    atexit.register(dump)
