"""Codec timings: ``.venv/bin/python tests/wire/bench_wire_codec.py``.

Not a test (pytest does not collect ``bench_*``): prints µs per operation,
best of several repeats, for the hot-path messages.
"""

from __future__ import annotations

import dataclasses
import timeit

from quorum import Entry, FetchRequest, FetchResponse, RecordKind
from quorum.wire import FrameDecoder, RecordSegments, decode_message, encode_message

CLUSTER = "pykraft-bench-cluster0"


def _best_us(function, number: int) -> float:
    return min(timeit.repeat(function, number=number, repeat=7)) / number * 1e6


def main() -> None:
    fetch = FetchRequest(
        src=2, dst=1, epoch=7, fetch_offset=123_456, last_fetched_epoch=7, request_id=99, read_token=41
    )
    heartbeat = FetchRequest(
        src=2, dst=1, epoch=7, fetch_offset=123_456, last_fetched_epoch=7, request_id=99, read_token=41,
        extension={"broker_id": 2, "broker_epoch": 17, "state": "online"},
    )
    records = tuple(Entry(123_456 + i, 7, RecordKind.DATA, bytes(100)) for i in range(100))
    response = FetchResponse(
        src=1, dst=2, epoch=7, request_id=99, leader_id=1, high_watermark=123_400, log_start_offset=0,
        records=records, read_token=42,
    )
    empty_response = FetchResponse(src=1, dst=2, epoch=7, request_id=99, leader_id=1, high_watermark=123_400, read_token=42)
    for name, message, number in (
        ("FetchRequest", fetch, 20_000),
        ("FetchRequest+heartbeat extension", heartbeat, 20_000),
        ("FetchResponse, no records", empty_response, 20_000),
        ("FetchResponse, 100 x 100 B records", response, 1_000),
    ):
        frame = encode_message(message, correlation_id=5, cluster_id=CLUSTER)
        payload = frame[4:]
        assert decode_message(payload, expected_cluster_id=CLUSTER).message == message
        encode_us = _best_us(lambda: encode_message(message, correlation_id=5, cluster_id=CLUSTER), number)
        decode_us = _best_us(lambda: decode_message(payload, expected_cluster_id=CLUSTER), number)
        print(f"{name:36} {len(frame):6} B  encode {encode_us:7.2f} µs  decode {decode_us:7.2f} µs  "
              f"round trip {encode_us + decode_us:7.2f} µs")
    # A Fetch round trip as the runtime sees it: encode request, frame it
    # through a FrameDecoder, decode; encode the 100-record answer, decode.
    decoder = FrameDecoder()

    def round_trip() -> None:
        for message in (fetch, response):
            decoder.feed(encode_message(message, correlation_id=5, cluster_id=CLUSTER))
            decode_message(decoder.next_frame(), expected_cluster_id=CLUSTER)

    print(f"{'Fetch + 100-record FetchResponse, framed':36} {_best_us(round_trip, 500):7.2f} µs for both legs")
    # The same records answered to many brokers (issue 21): packed and
    # checked for each answer, or once (RecordSegments) and found after.
    for count in (1, 2, 3, 4, 8, 100, 1000):
        answer = FetchResponse(
            src=1, dst=2, epoch=7, request_id=99, leader_id=1, high_watermark=123_400, log_start_offset=0,
            records=tuple(Entry(123_456 + i, 7, RecordKind.DATA, bytes(100)) for i in range(count)), read_token=42,
        )
        segments = RecordSegments()
        encode_message(answer, correlation_id=5, cluster_id=CLUSTER, record_segments=segments)
        number = max(100, 20_000 // count)
        each_us = _best_us(lambda: encode_message(answer, correlation_id=5, cluster_id=CLUSTER), number)
        found_us = _best_us(
            lambda: encode_message(answer, correlation_id=5, cluster_id=CLUSTER, record_segments=segments), number
        )
        print(f"{f'FetchResponse, {count} x 100 B records':36} encode {each_us:7.2f} µs, "
              f"records found packed {found_us:7.2f} µs")
    # A voter's answer at the end of a long run (the leader's steady state:
    # each batch's records are the run's last): found by position, its cost
    # not growing with the run.
    for run_records in (200, 30_000):
        run = tuple(Entry(i, 7, RecordKind.DATA, bytes(100)) for i in range(run_records))
        segments = RecordSegments()
        encode_message(dataclasses.replace(response, records=run), correlation_id=5, cluster_id=CLUSTER, record_segments=segments)
        tail = dataclasses.replace(response, records=run[-100:])
        found_us = _best_us(
            lambda: encode_message(tail, correlation_id=5, cluster_id=CLUSTER, record_segments=segments), 2_000
        )
        print(f"{f'FetchResponse, last 100 of a {run_records:,}-record run':36} records found packed {found_us:7.2f} µs")


if __name__ == "__main__":
    main()
