"""`make bench`: every benchmark in bench/, one after the other.

    python -m bench.run_all [--quick]

Runs bench.quorum_bench (pykraft vs etcd / ZooKeeper / PySyncObj), then every
hook in OTHER_BENCHES whose module exists (for example bench.checker_bench,
owned by the checker work, and bench.metadata_bench, pykraft vs Apache Kafka's
KRaft, bench.abuse_bench, hostile clients against the leader, bench.reconnect_bench,
a broker stampede after a controller failover,
bench.write_cpu_bench, the write path's CPU per write, and bench.metrics_cost_bench,
what metrics cost on the hot path), calling its `main(argv)` with `--quick` when
given `--quick`.  A missing module is skipped with a message.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

#: Other benchmark modules run after the quorum benchmark, if present.
#: Each must expose main(argv: list[str]) -> int | None.
OTHER_BENCHES = [
    "bench.checker_bench",
    "bench.checker_small_bench",
    "bench.registration_bench",
    "bench.heartbeat_bench",
    "bench.metadata_bench",
    "bench.abuse_bench",
    "bench.reconnect_bench",
    "bench.write_cpu_bench",
    "bench.playground_bench",
    "bench.metrics_cost_bench",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    args = parser.parse_args(argv)
    passthrough = ["--quick"] if args.quick else []

    from . import quorum_bench

    exit_code = quorum_bench.main(passthrough) or 0
    for module_name in OTHER_BENCHES:
        if importlib.util.find_spec(module_name) is None:
            print(f"[run_all] {module_name}: not present, skipped", file=sys.stderr)
            continue
        module = importlib.import_module(module_name)
        print(f"[run_all] running {module_name}", file=sys.stderr, flush=True)
        exit_code = (module.main(passthrough) or 0) or exit_code
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
