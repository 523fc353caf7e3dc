"""Decoder cost of msgpack bombs (issue 15; not a test: pytest does not
collect it). Runs against whichever tree PYTHONPATH names::

    PYTHONPATH=/path/to/tree .venv/bin/python tests/runtime/measure_hostile_peers.py

For a 1 MiB Fetch-extension bomb of empty maps, empty arrays, 2-char
strings and one-item arrays: whether a node's decoder (``NODE_LIMITS``)
accepts it, and its tracemalloc peak (bytes decoded per byte received).

The attacks against running nodes (forged epochs, vote floods, stalled
frames, pipelining clients, bombs, garbage) are the abuse benchmark's
(``python -m bench.abuse_bench``), built on ``jepsen_like/nemesis/_hostile.py``.
"""

import tracemalloc

from jepsen_like.nemesis._hostile import msgpack_bomb
from quorum.wire import NODE_LIMITS, RemoteProtocolError, decode_message

CLUSTER = "pykraft"


def bombs() -> None:
    items = [("empty maps", b"\x80"), ("empty arrays", b"\x90"), ("2-char strings", b"\xa2ab"), ("one-item arrays", b"\x91\x00")]
    for name, item in items:
        frame = msgpack_bomb(NODE_LIMITS.small_frame_bytes_max - 8, CLUSTER, in_fetch_extension=True, item=item)
        payload = frame[4:]
        tracemalloc.start()
        try:
            decode_message(payload, expected_cluster_id=CLUSTER, limits=NODE_LIMITS)
            outcome = "accepted"
        except RemoteProtocolError as error:
            outcome = type(error).__name__
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"1 MiB Fetch-extension bomb of {name}: {outcome}, peak {peak / 2**20:.1f} MiB ({peak / len(payload):.0f}x)")


if __name__ == "__main__":
    bombs()
