"""Micro-benchmark of the durable append path: append + flush rounds.

    python -m quorum.storage._bench [--dir DIR] [--seconds S] [--no-fsync]

For batches of 1 and of 100 records (~100 bytes each), runs append+flush
rounds for a few seconds and prints records/s and rounds (fsyncs)/s. One
round is what one Fetch/append round of the runtime costs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from .._types import Entry, RecordKind
from ._segments import SegmentedLog


def measure(directory: Path, batch_records: int, seconds: float, fsync: bool, record_bytes: int = 100) -> dict:
    log = SegmentedLog.open(directory, fsync=fsync)
    payload = b"x" * record_bytes
    offset = 0
    rounds = 0
    started = time.perf_counter()
    deadline = started + seconds
    try:
        while time.perf_counter() < deadline:
            batch = [Entry(offset + i, 1, RecordKind.DATA, payload) for i in range(batch_records)]
            log.append(batch)
            log.flush()
            offset += batch_records
            rounds += 1
    finally:
        elapsed = time.perf_counter() - started
        log.close()
    return {
        "batch_records": batch_records,
        "fsync": fsync,
        "records_per_s": offset / elapsed,
        "rounds_per_s": rounds / elapsed,
        "mean_round_ms": 1000 * elapsed / max(rounds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="pykraft-bench-", dir=args.dir))
    try:
        for batch_records in (1, 100):
            result = measure(base / f"b{batch_records}", batch_records, args.seconds, not args.no_fsync)
            print(
                f"batch={result['batch_records']:>3} fsync={result['fsync']!s:<5} "
                f"{result['records_per_s']:>12,.0f} records/s {result['rounds_per_s']:>9,.0f} append+flush/s "
                f"({result['mean_round_ms']:.3f} ms per round)"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
