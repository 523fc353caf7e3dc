"""The leader's answers to many parked brokers carry the same records (one
append answers them all): the transport's connections share one
``RecordSegments``, so those records are checked and packed once for all of
them, and each connection writes the very frame ``encode_message`` makes
(issue 21)."""

from __future__ import annotations


from quorum import Entry, FetchResponse, RecordKind
from quorum.runtime import TcpTransport
from quorum.runtime._tcp import _Connection
from quorum.wire import encode_message
from tests.scripted_peer import ScriptedPeer

CLUSTER = "segments"


def _written(connection: _Connection) -> bytes:
    return b"".join(connection.writer._pending)


def test_one_appends_answers_to_many_brokers_pack_its_records_once() -> None:
    transport = TcpTransport(1, cluster_id=CLUSTER, listen=None, peer_addresses={})
    records = tuple(Entry(40 + i, 3, RecordKind.DATA, b"unfence broker %d" % i) for i in range(50))
    brokers = range(1000, 1010)
    connections = {
        broker: _Connection(ScriptedPeer([]), f"broker {broker}", CLUSTER, transport.limits, batch=transport._batch)
        for broker in brokers
    }
    answers = {
        broker: FetchResponse(
            src=1, dst=broker, epoch=3, request_id=broker, leader_id=1, high_watermark=90, log_start_offset=0,
            # Each broker from its own offset to the log's end.
            records=records[broker % 7 :], read_token=broker,
        )
        for broker in brokers
    }
    transport.begin_batch()
    for broker in brokers:
        assert connections[broker].send(answers[broker], correlation_id=broker)
    transport.end_batch()
    for broker in brokers:
        expected = encode_message(answers[broker], correlation_id=broker, cluster_id=CLUSTER, limits=transport.limits)
        assert _written(connections[broker]) == expected
    segments = transport._batch.record_segments
    # Broker 1000's answer (from offset 40 + 6) packed its 44 records;
    # broker 1001's reaches further back (from 40 + 0): all 50 packed anew;
    # the eight others' found.
    assert (segments.records_packed, segments.hits) == (94, 8)
