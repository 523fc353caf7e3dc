"""The largest step a commit makes for a leader whose brokers lag, in process.

    PYTHONPATH=<tree> python bench/observer_step_bench.py [--observers 5000] [--records 1000] [--rounds 3]

Issue 21's start-up: 5,000 brokers start at once and each first heartbeat
appends an unfencing record, so every broker lags by hundreds or thousands
of records when the high watermark moves. Here a sans-IO leader (three
voters, memory only; ``bench.observer_fetch_bench``'s) has N observers
caught up and parked; R records are appended in one batch and committed by
a follower's Fetch; every observer answered fetches again at once (its
Fetch is a later step of the leader's, in order), until all N have the
records. Measured
per step of the core: the observer answers it made, the records they
carry, and the CPU to encode them (``encode_message``, what the runtime
does with each before it is sent, with one ``RecordSegments`` for all of
them as the runtime's transport has where the tree has it;
``time.process_time``). Printed: the
largest step (answers, records, encoding ms), the steps until every
observer was answered, and the encoding of all answers.

Run as a file, as above, so that ``quorum`` comes from ``<tree>`` (its own
directory, not the checkout, is first on the path): alternating two trees
compares them. It uses public names of ``quorum`` only.
"""

from __future__ import annotations

import argparse
import time

from quorum import FetchResponse
from quorum.wire import encode_message

try:  # the runtime's sender keeps one (issue 21); trees before it do not
    from quorum.wire import RecordSegments
except ImportError:
    RecordSegments = None

# A sibling file (this one runs as a file, its directory first on the path).
from observer_fetch_bench import FIRST_OBSERVER, Leader  # type: ignore[import-not-found]

CLUSTER_ID = "observer-step-bench"


def one_round(observers: int, records: int) -> dict[str, float]:
    leader = Leader(observers)
    node = leader.node
    leader.park_everyone()
    _offset, out = node.propose([b"unfence broker %d" % i for i in range(records)])
    follower_fetches = []
    for response in leader._settle(out):
        if isinstance(response, FetchResponse):
            fetcher = leader.fetchers[response.dst]
            fetcher.took(response)
            follower_fetches.append(fetcher.fetch(node.epoch))
    # The first follower's next Fetch commits the batch; then every step is
    # one Fetch: the other follower's, then each answered observer's next.
    pending = list(follower_fetches)
    answered: set[int] = set()
    largest = {"answers": 0, "records": 0, "encode_ms": 0.0}
    steps = 0
    encode_s_total = 0.0
    # As the runtime's transport sends: one RecordSegments for all answers.
    send_options = {} if RecordSegments is None else {"record_segments": RecordSegments()}
    while pending and steps < 1_000_000:
        request = pending.pop(0)
        sent = leader._settle(node.step(request))
        steps += 1
        step_answers = [m for m in sent if isinstance(m, FetchResponse) and m.dst >= FIRST_OBSERVER]
        started = time.process_time()
        for response in step_answers:
            encode_message(response, correlation_id=1, cluster_id=CLUSTER_ID, **send_options)
        encode_s = time.process_time() - started
        encode_s_total += encode_s
        step_records = sum(len(m.records) for m in step_answers)
        if step_records > largest["records"] or (step_records == largest["records"] and encode_s * 1e3 > largest["encode_ms"]):
            largest = {"answers": len(step_answers), "records": step_records, "encode_ms": encode_s * 1e3}
        for response in step_answers:
            fetcher = leader.fetchers[response.dst]
            fetcher.took(response)
            if fetcher.fetch_offset == node.log.end_offset:
                answered.add(response.dst)
            pending.append(fetcher.fetch(node.epoch))  # parked once it has everything
        if len(answered) == observers:
            break
    if len(answered) != observers:
        raise RuntimeError(f"{observers - len(answered)} observers were not answered")
    return {**largest, "steps": steps, "encode_total_ms": encode_s_total * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--observers", type=int, default=5000)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    results = [one_round(args.observers, args.records) for _ in range(args.rounds)]
    best = min(results, key=lambda r: r["encode_ms"])
    print(
        f"{args.observers} observers, {args.records} records committed at once (min of {args.rounds}):"
        f" largest step {best['answers']} answers, {best['records']} records, {best['encode_ms']:.1f} ms to encode;"
        f" {best['steps']} steps until all answered; {min(r['encode_total_ms'] for r in results):.0f} ms to encode all"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
