"""What a log's ``fdatasync`` costs when the file grows, against a file
whose blocks exist already (issue 21: preallocated segments).

    python -m bench.fsync_prealloc [--dir DIR] [--writers 3] [--syncs 3000] [--record-bytes 160]

``--writers`` processes at once (three: a quorum's voters on one disk),
each appending ``--record-bytes`` with one ``write`` and one
``fdatasync`` per record, ``--syncs`` times, to its own file, in three
ways one after the other:

  append     the file grows with every write (what a segment does today:
             each fdatasync also commits the new file size to the journal)
  zeroed     the file was written full of zeros and synced first; the
             writes overwrite them (no size or block change to commit)
  fallocate  ``posix_fallocate`` reserved the blocks first (on ext4 they
             are unwritten extents, converted as they are written)

and prints each way's p50, p90 and p99 latency of write + fdatasync, in
µs, over all writers. The files go in a temporary directory under
``--dir`` (default: the system's, where the other benchmarks keep their
data dirs) and are removed. docs/benchmarks.md, "Where the sequential
write's time goes now", has figures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

WAYS = ("append", "zeroed", "fallocate")
PREALLOCATED_BYTES = 64 * 1024 * 1024


def _one_writer(way: str, path: str, syncs: int, record_bytes: int, ready: Any, start: Any, results: Any) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if way == "zeroed":
            chunk = b"\0" * (1024 * 1024)
            for _ in range(PREALLOCATED_BYTES // len(chunk)):
                os.write(fd, chunk)
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        elif way == "fallocate":
            os.posix_fallocate(fd, 0, PREALLOCATED_BYTES)
            os.fsync(fd)
        record = b"r" * record_bytes
        ready.release()
        start.wait()
        latencies_ns = []
        for _ in range(syncs):
            began = time.perf_counter_ns()
            os.write(fd, record)
            os.fdatasync(fd)
            latencies_ns.append(time.perf_counter_ns() - began)
        results.put(latencies_ns)
    finally:
        os.close(fd)


def measure(way: str, directory: Path, writers: int, syncs: int, record_bytes: int) -> dict[str, float]:
    """One way's write + fdatasync latency percentiles (µs) over
    ``writers`` processes syncing at once."""
    context = multiprocessing.get_context("spawn")
    ready = context.Semaphore(0)
    start = context.Event()
    results = context.Queue()
    processes = [
        context.Process(
            target=_one_writer, args=(way, str(directory / f"{way}-{number}.log"), syncs, record_bytes, ready, start, results)
        )
        for number in range(writers)
    ]
    for process in processes:
        process.start()
    try:
        # Every writer has prepared its file before any of them syncs.
        for _ in processes:
            if not ready.acquire(timeout=120):
                raise RuntimeError(f"a writer did not prepare its file in 120 s ({way})")
        start.set()
        latencies = sorted(latency for _ in processes for latency in results.get(timeout=600))
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        for number in range(writers):
            (directory / f"{way}-{number}.log").unlink(missing_ok=True)

    def percentile(fraction: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * fraction))] / 1000

    return {"p50_us": percentile(0.50), "p90_us": percentile(0.90), "p99_us": percentile(0.99)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--writers", type=int, default=3, help="processes syncing at once")
    parser.add_argument("--syncs", type=int, default=3000, help="write + fdatasync rounds per writer")
    parser.add_argument("--record-bytes", type=int, default=160, help="bytes per write")
    options = parser.parse_args(argv)
    if options.writers < 1 or options.syncs < 1 or options.record_bytes < 1:
        parser.error("--writers, --syncs and --record-bytes must be at least 1")
    if options.syncs * options.record_bytes > PREALLOCATED_BYTES:
        parser.error(f"--syncs x --record-bytes must fit in the {PREALLOCATED_BYTES} preallocated bytes")
    directory = Path(tempfile.mkdtemp(prefix="pykraft-fsync-", dir=options.dir))
    try:
        print(f"{options.writers} writers at once, {options.syncs} x (write {options.record_bytes} B + fdatasync) each, in {directory}")
        for way in WAYS:
            figures = measure(way, directory, options.writers, options.syncs, options.record_bytes)
            print(f"  {way:<10} p50 {figures['p50_us']:6.0f} us   p90 {figures['p90_us']:6.0f} us   p99 {figures['p99_us']:6.0f} us")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
