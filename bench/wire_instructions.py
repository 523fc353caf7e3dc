"""The wire work of one sequential write, per process, alone: the frames
each side encodes and decodes (``quorum.wire``), repeated COUNT times, for
instruction counts under cachegrind:

    PYTHONHASHSEED=0 PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no \\
        .venv/bin/python bench/wire_instructions.py leader|follower|client[-batch] COUNT

The difference of two runs with different COUNTs, divided by the
difference, is the count per write with start-up cancelled out (as
``bench/write_instructions.py``, whose in-process setup sends no frames).
Per sequential write of 100 bytes the leader decodes the client's
ProposeRequest and two acknowledging Fetches and encodes two Fetch answers
(one record each) and the ProposeResponse; a follower decodes one Fetch
answer and encodes one Fetch; the client encodes the request and decodes
the answer. The ``-batch`` sides do the same for one batch of 100
records (one proposal, Fetch answers of 100 records). ``--calls`` prints the Python function calls of one write per
side instead (cProfile). Run as a file, not as a module, so that it
imports the ``quorum`` of the tree on ``PYTHONPATH``; it uses only what
26026ee already had, so the same script measures an old tree too.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable

import quorum.wire as wire
from quorum._messages import FetchRequest, FetchResponse
from quorum._types import Entry, RecordKind

CLUSTER_ID = "bench"
RECORD = b"x" * 100
BATCH_RECORDS = 100


def _sides() -> dict[str, Callable[[], object]]:
    data_kind = RecordKind.DATA
    fetch = FetchRequest(src=2, dst=1, epoch=3, fetch_offset=1000, last_fetched_epoch=3, request_id=77, read_token=5)
    answer = FetchResponse(src=1, dst=2, epoch=3, request_id=77, leader_id=1, high_watermark=999, log_start_offset=0,
                           records=(Entry(1000, 3, data_kind, RECORD),))  # fmt: skip
    propose = wire.ProposeRequest(records=(RECORD,))
    proposed = wire.ProposeResponse(offset=1000)

    def encode(message: object) -> bytes:
        return wire.encode_message(message, correlation_id=12, cluster_id=CLUSTER_ID)

    payloads = {name: encode(message)[4:] for name, message in
                (("fetch", fetch), ("answer", answer), ("propose", propose), ("proposed", proposed))}  # fmt: skip

    def decode(name: str) -> object:
        return wire.decode_message(payloads[name], expected_cluster_id=CLUSTER_ID)

    batch = tuple(RECORD for _ in range(BATCH_RECORDS))
    batch_answer = FetchResponse(src=1, dst=2, epoch=3, request_id=77, leader_id=1, high_watermark=999,
                                 log_start_offset=0,
                                 records=tuple(Entry(1000 + i, 3, data_kind, RECORD) for i in range(BATCH_RECORDS)))  # fmt: skip
    propose_batch = wire.ProposeRequest(records=batch)
    proposed_batch = wire.ProposeResponse(offset=1000, results=(None,) * BATCH_RECORDS)
    payloads.update({name: encode(message)[4:] for name, message in
                     (("batch_answer", batch_answer), ("propose_batch", propose_batch),
                      ("proposed_batch", proposed_batch))})  # fmt: skip
    return {
        "leader": lambda: (decode("propose"), encode(proposed), encode(answer), encode(answer),
                           decode("fetch"), decode("fetch")),  # fmt: skip
        "follower": lambda: (decode("answer"), encode(fetch)),
        "client": lambda: (encode(propose), decode("proposed")),
        # One batch of BATCH_RECORDS records, the same frames.
        "leader-batch": lambda: (decode("propose_batch"), encode(proposed_batch), encode(batch_answer),
                                 encode(batch_answer), decode("fetch"), decode("fetch")),  # fmt: skip
        "follower-batch": lambda: (decode("batch_answer"), encode(fetch)),
        "client-batch": lambda: (encode(propose_batch), decode("proposed_batch")),
    }


def main(argv: list[str]) -> int:
    sides = _sides()
    if argv == ["--calls"]:
        for side, one_write in sides.items():
            one_write()
            profile = cProfile.Profile()
            profile.enable()
            one_write()
            profile.disable()
            calls = sum(stat[1] for stat in pstats.Stats(profile).stats.values()) - 1  # less profile.disable
            print(f"{side:14} {calls} Python and C calls per {'batch' if side.endswith('-batch') else 'write'}")
        return 0
    if len(argv) != 2 or argv[0] not in sides or not argv[1].isdigit():
        print(f"usage: python bench/wire_instructions.py {'|'.join(sides)} COUNT | --calls", file=sys.stderr)
        return 2
    one_write = sides[argv[0]]
    for _ in range(int(argv[1])):
        one_write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
