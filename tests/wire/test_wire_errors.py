"""What each kind of bad input is answered with, and what encoding refuses."""

from __future__ import annotations

import dataclasses

import tracemalloc
from dataclasses import replace

import msgpack
import pytest

from _wire_strategies import EXAMPLES
from quorum import (
    EndQuorumEpochRequest,
    Entry,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    RecordKind,
    ReplicaDescription,
    SnapshotId,
    VoteRequest,
)
from quorum.wire import (
    ClusterIdMismatchError,
    DescribeQuorumResponse,
    ErrorFrame,
    FrameDecoder,
    FrameTooLargeError,
    Hello,
    InvalidMessageError,
    LocalProtocolError,
    MalformedFrameError,
    ProposeRequest,
    ProposeResponse,
    ReadRequest,
    ReadResponse,
    RemoteProtocolError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
    WireLimits,
    decode_message,
    encode_frame,
    encode_message,
)

CLUSTER = "cluster-a"


def _decode(value, **kwargs):
    return decode_message(msgpack.packb(value), expected_cluster_id=CLUSTER, **kwargs)


def _vote_body(**changes):
    body = {"src": 2, "dst": 1, "epoch": 8, "last_epoch": 7, "end_offset": 43, "pre_vote": True}
    body.update(changes)
    return [1, 1, 11, CLUSTER, list(body.values())]


def _fetch_response(records, epoch=7, changes=None):
    body = [1, 4, epoch, 12, 1, 0, 41, 10, records, None, None, 4, None]
    for index, value in (changes or {}).items():
        body[index] = value
    return [8, 1, 11, CLUSTER, body]


# ---------------------------------------------------------------------------
# Framing and envelope: close the connection
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",  # never used in msgpack
        b"GET / HTTP/1.1\r\n\r\n",
        msgpack.packb([1, 1, 1, CLUSTER, []]) + b"\x00",  # trailing bytes
        b"\xa2\xff\xfe",  # invalid UTF-8 str
        msgpack.packb({1: 2}),  # int map key
        b"\xd4\x01\x00",  # an ext type
    ],
)
def test_a_payload_that_is_not_one_msgpack_value_closes(payload):
    with pytest.raises(MalformedFrameError) as caught:
        decode_message(payload, expected_cluster_id=CLUSTER)
    assert not caught.value.recoverable
    assert caught.value.correlation_id is None


@pytest.mark.parametrize(
    "envelope",
    [
        None,
        {"type": 1},
        [1, 1, 1, CLUSTER],
        [1, 1, 1, CLUSTER, [], "extra"],
        [1, 1, -1, CLUSTER, []],
        [1, 1, True, CLUSTER, []],
        [1, 1, 2**63, CLUSTER, []],
        [1, 1, "7", CLUSTER, []],
    ],
)
def test_an_envelope_of_the_wrong_shape_or_unreadable_correlation_id_closes(envelope):
    with pytest.raises(MalformedFrameError) as caught:
        _decode(envelope)
    assert not caught.value.recoverable
    assert caught.value.correlation_id is None


@pytest.mark.parametrize("envelope", [["1", 1, 5, CLUSTER, []], [1, 1.0, 5, CLUSTER, []], [1, 1, 5, b"c", []]])
def test_an_envelope_with_wrong_types_but_a_correlation_id_can_be_answered_then_closes(envelope):
    with pytest.raises(MalformedFrameError) as caught:
        _decode(envelope)
    assert caught.value.correlation_id == 5 and not caught.value.recoverable


def test_a_foreign_cluster_id_is_inconsistent_cluster_id_and_closes():
    frame = encode_message(EXAMPLES[VoteRequest], correlation_id=3, cluster_id="other" * 50)
    with pytest.raises(ClusterIdMismatchError) as caught:
        decode_message(frame[4:], expected_cluster_id=CLUSTER)
    error = caught.value
    assert error.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert error.correlation_id == 3 and not error.recoverable
    assert error.received_cluster_id == "other" * 50
    assert len(str(error)) < 200
    assert error.to_error_frame() == ErrorFrame(
        code=ErrorCode.INCONSISTENT_CLUSTER_ID, message=str(error), correlation_id=3
    )


def test_a_payload_over_the_limit_is_refused_before_unpacking():
    with pytest.raises(FrameTooLargeError):
        decode_message(b"\x00" * 101, expected_cluster_id=CLUSTER, limits=WireLimits(frame_bytes_max=100))


@pytest.mark.parametrize("header", [b"\xdd\xff\xff\xff\xff", b"\xdd\x00\xff\xff\xff", b"\xdf\x00\xff\xff\xff", b"\xdb\x00\xff\xff\xff"])
def test_a_tiny_payload_declaring_a_huge_container_allocates_nothing_big(header):
    tracemalloc.start()
    try:
        with pytest.raises(MalformedFrameError):
            decode_message(header, expected_cluster_id=CLUSTER)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


# ---------------------------------------------------------------------------
# A bad message in a good frame: answer INVALID_REQUEST, keep the connection
# ---------------------------------------------------------------------------


def test_an_unknown_type_code_is_recoverable():
    with pytest.raises(UnknownMessageTypeError) as caught:
        _decode([99, 1, 5, CLUSTER, []])
    error = caught.value
    assert error.recoverable and error.correlation_id == 5 and error.type_code == 99
    assert error.error_code is ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version", [0, 2, 2**64 - 1])
def test_an_unsupported_version_is_recoverable(version):
    envelope = _vote_body()
    envelope[1] = version
    with pytest.raises(UnsupportedVersionError) as caught:
        _decode(envelope)
    error = caught.value
    assert error.recoverable and error.version == version and error.supported_versions == (1,)
    assert error.message_type == "VoteRequest"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"epoch": True}, "epoch"),  # bool is not int
        ({"pre_vote": 1}, "pre_vote"),  # nor int bool
        ({"src": 2**31}, "src"),
        ({"dst": -1}, "dst"),
        ({"epoch": 2**63}, "epoch"),
        ({"end_offset": 1.0}, "end_offset"),
        ({"last_epoch": None}, "last_epoch"),
        ({"last_epoch": "7"}, "last_epoch"),
        ({"voter_directory_id": 7}, "voter_directory_id"),
        ({"voter_directory_id": ""}, "voter_directory_id"),
        ({"voter_directory_id": "a:b"}, "voter_directory_id"),  # would break ID@HOST:PORT:DIR lists
        ({"voter_directory_id": "d" * 65}, "voter_directory_id"),
        ({"voter_directory_id": b"dir"}, "voter_directory_id"),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_named(changes, field):
    with pytest.raises(InvalidMessageError) as caught:
        _decode(_vote_body(**changes))
    error = caught.value
    assert error.recoverable and error.correlation_id == 11
    assert error.error_code is ErrorCode.INVALID_REQUEST
    assert error.message_type == "VoteRequest"
    assert str(error).startswith(f"VoteRequest {field} must be")


@pytest.mark.parametrize("arity", [0, 5, 7])
def test_wrong_arity_is_invalid(arity):
    envelope = _vote_body()
    envelope[4] = (envelope[4] + [0])[:arity]
    with pytest.raises(InvalidMessageError):
        _decode(envelope)


def test_directory_ids_are_optional_trailing_fields_for_older_peers():
    """KIP-853's directory ids came later: a VoteRequest of 6 fields and a
    FetchRequest of 8 (a peer that predates them) decode with None; a
    FetchRequest's directory id is checked like any other field."""
    vote = _decode(_vote_body()).message
    assert vote.voter_directory_id is None
    assert _decode(_vote_body(voter_directory_id="abc-1_2")).message.voter_directory_id == "abc-1_2"
    fetch = [2, 1, 7, 40, 6, 99, 3, None]
    assert _decode([7, 1, 11, CLUSTER, fetch]).message.directory_id is None
    assert _decode([7, 1, 11, CLUSTER, [*fetch, "d3"]]).message.directory_id == "d3"
    for bad in (3, "", "no spaces", "x" * 65):
        with pytest.raises(InvalidMessageError, match="directory_id must be"):
            _decode([7, 1, 11, CLUSTER, [*fetch, bad]])


def test_directory_ids_already_seen_are_remembered_in_bounds_and_bad_ones_never():
    """The decoder remembers directory ids that passed the check (every
    Fetch of a voter carries one): a remembered id decodes again, a bad one
    is refused however many good ones came before, and a peer sending new
    ids forever cannot grow the memory past its bound."""
    from quorum.wire import _schema

    fetch = [2, 1, 7, 40, 6, 99, 3, None]
    for _ in range(2):
        assert _decode([7, 1, 11, CLUSTER, [*fetch, "dir-a"]]).message.directory_id == "dir-a"
    assert "dir-a" in _schema._VALID_DIRECTORY_IDS
    for index in range(_schema._VALID_DIRECTORY_IDS_MAX + 10):
        assert _decode([7, 1, 11, CLUSTER, [*fetch, f"d{index}"]]).message.directory_id == f"d{index}"
        assert len(_schema._VALID_DIRECTORY_IDS) <= _schema._VALID_DIRECTORY_IDS_MAX
    for bad in ("no spaces", "x" * 65, ["dir-a"]):
        with pytest.raises(InvalidMessageError, match="directory_id must be"):
            _decode([7, 1, 11, CLUSTER, [*fetch, bad]])
    assert "no spaces" not in _schema._VALID_DIRECTORY_IDS


def test_an_unknown_error_code_is_invalid():
    with pytest.raises(InvalidMessageError, match="error must be a known error code"):
        _decode([4, 1, 1, CLUSTER, [2, 1, 7, 5]])


GOOD = [[10, 6, 1, b""], [11, 7, 0, b"a"], [12, 7, 0, b"b"]]


@pytest.mark.parametrize(
    ("records", "reason"),
    [
        ([[10, 6, 1, b""], [12, 7, 0, b"b"]], r"records\[1\]\.offset is 12, expected 11"),
        ([[10, 6, 1, b""], [10, 7, 0, b"b"]], r"records\[1\]\.offset is 10, expected 11"),
        ([[10, 7, 1, b""], [11, 6, 0, b"b"]], r"records\[1\]\.epoch 6 is below"),
        ([[10, 8, 0, b""]], r"records\[0\]\.epoch 8 is above the sender's epoch 7"),
        ([[10, 7, 3, b""]], r"records\[0\]\.kind must be a known record kind"),
        ([[10, 7, 2, b"not a voter set"]], r"records\[0\] holds no voter set"),
        ([[10, 7, True, b""]], r"records\[0\]\.kind"),
        ([[10, 7, 0, "text"]], r"records\[0\]\.data must be bytes"),
        ([[10, 7, 0]], r"records\[0\] must be an array"),
        ([[-1, 7, 0, b""]], r"records\[0\]\.offset must be"),
        ([[10, 7, 0, b""], None], r"records\[1\] must be an array"),
        ({"0": [10, 7, 0, b""]}, "records must be an array"),
        ([[2**63 - 1, 7, 0, b""], [2**63, 7, 0, b""]], "records run past the largest offset"),
    ],
)
def test_malformed_records_never_reach_the_log(records, reason):
    assert _decode(_fetch_response(GOOD)).message.records[2] == Entry(12, 7, RecordKind.DATA, b"b")
    with pytest.raises(InvalidMessageError, match=reason):
        _decode(_fetch_response(records))


def test_records_may_start_anywhere_and_end_at_the_largest_offset():
    message = _decode(_fetch_response([[2**63 - 1, 7, 0, b""]])).message
    assert message.records == (Entry(2**63 - 1, 7, RecordKind.DATA, b""),)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({9: [1]}, "diverging must be an array"),
        ({9: [1, -2]}, "diverging.offset"),
        ({10: [1, 2, 3]}, "snapshot_id must be an array"),
        ({4: True}, "leader_id"),
    ],
)
def test_nested_values_are_checked(changes, reason):
    with pytest.raises(InvalidMessageError, match=reason):
        _decode(_fetch_response([], changes=changes))


def test_snapshot_chunks_are_bounded():
    limits = WireLimits(snapshot_chunk_bytes_max=4)
    body = [1, 4, 7, 13, 1, 0, [1000, 6], 0, 10, b"12345"]
    with pytest.raises(InvalidMessageError, match="chunk must be bytes of at most 4"):
        _decode([10, 1, 1, CLUSTER, body], limits=limits)
    body[-1] = b"1234"
    assert _decode([10, 1, 1, CLUSTER, body], limits=limits).message.chunk == b"1234"
    body[7] = 7  # position 7 + 4 bytes > size 10
    with pytest.raises(InvalidMessageError, match="runs past the snapshot size"):
        _decode([10, 1, 1, CLUSTER, body], limits=limits)


def _fetch_with_extension(extension) -> list:
    return [7, 1, 1, CLUSTER, [2, 1, 5, 0, 0, 1, 0, extension]]


def test_extensions_are_plain_bounded_msgpack_values():
    limits = WireLimits(extension_depth_max=2, extension_items_max=5)
    assert _decode(_fetch_with_extension({"a": [1, b"x"]}), limits=limits).message.extension == {"a": [1, b"x"]}
    assert _decode(_fetch_with_extension({b"k": None}), limits=limits).message.extension == {b"k": None}
    with pytest.raises(InvalidMessageError, match="nests containers more than 2 deep"):
        _decode(_fetch_with_extension([[[1]]]), limits=limits)
    with pytest.raises(InvalidMessageError, match="more than 5 values"):
        _decode(_fetch_with_extension([1, 2, 3, 4, 5]), limits=limits)
    with pytest.raises(InvalidMessageError, match="not a plain msgpack value"):
        _decode(_fetch_with_extension([msgpack.ExtType(5, b"")]))


def test_preferred_successors_are_distinct_node_ids():
    with pytest.raises(InvalidMessageError, match="names a node twice"):
        _decode([5, 1, 1, CLUSTER, [1, 2, 7, [3, 3]]])
    with pytest.raises(InvalidMessageError, match=r"preferred_successors\[0\]"):
        _decode([5, 1, 1, CLUSTER, [1, 2, 7, [False]]])


@pytest.mark.parametrize(
    "envelope",
    [
        [64, 1, 1, CLUSTER, [0, "no error is not an error", None]],
        [65, 1, 1, CLUSTER, [None, "voter"]],
        [65, 1, 1, CLUSTER, [1, "admin"]],
        [32, 1, 1, CLUSTER, [[]]],
        [32, 1, 1, CLUSTER, [["text"]]],
        [33, 1, 1, CLUSTER, [0, None, None]],
        [34, 1, 1, CLUSTER, ["stale", b""]],
        [35, 1, 1, CLUSTER, [0, 5, None, "text"]],
        [36, 1, 1, CLUSTER, [None]],
        [37, 1, 1, CLUSTER, [0, 1, 7, 41, [[1, None]], []]],
        [37, 1, 1, CLUSTER, [0, 1, 7, 41, [[1, None, None], [1, 3, 4]], []]],
    ],
)
def test_client_and_connection_messages_are_checked_too(envelope):
    with pytest.raises(InvalidMessageError):
        _decode(envelope)


def test_error_text_never_holds_the_whole_bad_value():
    with pytest.raises(RemoteProtocolError) as caught:
        _decode(_vote_body(last_epoch="x" * 1_000_000))
    assert len(str(caught.value)) < 300


# ---------------------------------------------------------------------------
# Encoding refuses what a peer would reject (LocalProtocolError)
# ---------------------------------------------------------------------------

RECORDS = (Entry(10, 6, RecordKind.DATA, b""), Entry(11, 7, RecordKind.DATA, b""))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({"src": 1}, "not a wire message"),
        (VoteRequest(src=1, dst=2, epoch=-1, last_epoch=0, end_offset=0, pre_vote=False), "epoch must be"),
        (VoteRequest(src=1, dst=2, epoch=True, last_epoch=0, end_offset=0, pre_vote=False), "epoch must be"),
        (VoteRequest(src=1, dst=2, epoch=1, last_epoch=0, end_offset=0, pre_vote=1), "pre_vote must be"),
        (FetchResponse(src=1, dst=2, epoch=7, request_id=1, leader_id=1, records=RECORDS[::-1]), "contiguous"),
        (FetchResponse(src=1, dst=2, epoch=6, request_id=1, leader_id=1, records=RECORDS), "above the sender"),
        (FetchResponse(src=1, dst=2, epoch=7, request_id=1, leader_id=1, diverging=(1, 2)), "cannot encode"),
        (
            FetchResponse(
                src=1, dst=2, epoch=7, request_id=1, leader_id=1,
                records=(Entry(10, 6, RecordKind.DATA, bytearray(b"x")),),
            ),
            "data must be bytes",
        ),
        (FetchRequest(src=1, dst=2, epoch=7, fetch_offset=0, last_fetched_epoch=0, request_id=1, extension={1, 2}), "set"),
        (FetchRequest(src=1, dst=2, epoch=7, fetch_offset=0, last_fetched_epoch=0, request_id=1, extension={1: 2}), "map key"),
        (FetchRequest(src=1, dst=2, epoch=7, fetch_offset=0, last_fetched_epoch=0, request_id=1, extension=2**64), "range"),
        (EndQuorumEpochRequest(src=1, dst=2, epoch=7, preferred_successors=(2, 2)), "twice"),
        (FetchResponse(src=1, dst=2, epoch=7, request_id=1, leader_id=1, error=5), "known error code"),
        (FetchSnapshotResponse(src=1, dst=2, epoch=7, request_id=1, leader_id=1, size=1, chunk=b"ab"), "past the snapshot size"),
    ],
)  # fmt: skip
def test_encoding_refuses_invalid_messages(message, reason):
    with pytest.raises(LocalProtocolError, match=reason):
        encode_message(message, correlation_id=1, cluster_id=CLUSTER)


def test_encoding_refuses_a_recursive_extension():
    loop: list = []
    loop.append(loop)
    message = FetchRequest(src=1, dst=2, epoch=7, fetch_offset=0, last_fetched_epoch=0, request_id=1, extension=loop)
    with pytest.raises(LocalProtocolError, match="nests containers"):
        encode_message(message, correlation_id=1, cluster_id=CLUSTER)


@pytest.mark.parametrize(
    ("correlation_id", "cluster_id"),
    [(-1, "c"), (True, "c"), (2**63, "c"), (1, ""), (1, "c" * 256), (1, b"c"), (1, "lone \ud800 surrogate")],
)
def test_encoding_refuses_a_bad_envelope(correlation_id, cluster_id):
    with pytest.raises(LocalProtocolError):
        encode_message(EXAMPLES[VoteRequest], correlation_id=correlation_id, cluster_id=cluster_id)


def test_encoding_refuses_a_frame_over_the_limit():
    message = FetchSnapshotResponse(
        src=1, dst=2, epoch=7, request_id=1, leader_id=1, snapshot_id=SnapshotId(5, 1), size=200, chunk=b"x" * 200
    )
    with pytest.raises(LocalProtocolError, match="over the limit"):
        encode_message(message, correlation_id=1, cluster_id=CLUSTER, limits=WireLimits(frame_bytes_max=100))


def test_diverging_and_snapshot_id_travel_in_their_documented_order():
    message = FetchResponse(
        src=1, dst=2, epoch=7, request_id=1, leader_id=1, diverging=OffsetAndEpoch(6, 40), snapshot_id=SnapshotId(30, 5)
    )
    body = msgpack.unpackb(encode_message(message, correlation_id=1, cluster_id=CLUSTER)[4:])[4]
    assert body[9] == [6, 40] and body[10] == [30, 5]


# ---------------------------------------------------------------------------
# The wire's own message classes validate on construction
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ProposeRequest(records=[]),
        lambda: ProposeRequest(records=["text"]),
        lambda: ProposeRequest(records=b"abc"),
        lambda: ProposeResponse(),
        lambda: ProposeResponse(offset=-1),
        lambda: ProposeResponse(error=True, offset=1),
        lambda: ReadRequest(mode="stale"),
        lambda: ReadResponse(offset=1, value="text"),
        lambda: ErrorFrame(code=ErrorCode.NONE, message="x"),
        lambda: ErrorFrame(code=ErrorCode.INVALID_REQUEST, message="x" * 5000),
        lambda: Hello(node_id=None, role="voter"),
        lambda: Hello(node_id=1, role="leader"),
        lambda: DescribeQuorumResponse(voters=[(1, None, None)]),
        lambda: DescribeQuorumResponse(voters=[ReplicaDescription(-1, None, None)]),
        lambda: DescribeQuorumResponse(epoch=True),
    ],
)
def test_wire_message_classes_refuse_invalid_fields(build):
    with pytest.raises(ValueError):
        build()


def test_a_batch_of_records_or_results_names_its_first_bad_member():
    """Records and results are checked over the whole batch at once; what
    fails is still found and named, wherever it sits in the batch."""
    with pytest.raises(ValueError, match=r"records\[10\] must be bytes"):
        ProposeRequest(records=[b"a"] * 10 + ["text", b"b", 7])
    with pytest.raises(ValueError, match=r"records\[1\] must be bytes"):
        ProposeRequest(records=[b"a", bytearray(b"b")])
    with pytest.raises(ValueError, match=r"results\[2\] must be bytes"):
        ProposeResponse(offset=1, results=(None, b"x", 5, b"y"))
    assert ProposeRequest(records=[b"a", b""] * 50).records == (b"a", b"") * 50
    assert ProposeResponse(offset=1, results=[None, b"x", None]).results == (None, b"x", None)


def test_wire_message_classes_normalise_lists_and_error_codes():
    assert ProposeRequest(records=[b"a"]).records == (b"a",)
    assert ErrorFrame(code=42, message="x").code is ErrorCode.INVALID_REQUEST
    assert ProposeResponse(error=6).error is ErrorCode.NOT_LEADER
    replica = ReplicaDescription(1, None, None)
    assert DescribeQuorumResponse(voters=[replica]).voters == (replica,)


@pytest.mark.parametrize(
    "changes",
    [{"frame_bytes_max": 0}, {"frame_bytes_max": 2**32}, {"extension_depth_max": -1}, {"replicas_max": True}],
)
def test_limits_are_checked(changes):
    with pytest.raises(ValueError):
        WireLimits(**changes)


def test_after_a_recoverable_error_the_connection_keeps_working():
    """A bad message between good ones costs only itself."""
    good = encode_message(EXAMPLES[VoteRequest], correlation_id=1, cluster_id=CLUSTER)
    bad = encode_frame(msgpack.packb(_vote_body(epoch=True)))
    unknown = encode_frame(msgpack.packb([99, 1, 3, CLUSTER, []]))
    decoder = FrameDecoder()
    decoder.feed(good + bad + unknown + good)
    outcomes = []
    while (payload := decoder.next_frame()) is not None:
        try:
            outcomes.append(decode_message(payload, expected_cluster_id=CLUSTER).message)
        except RemoteProtocolError as error:
            assert error.recoverable
            outcomes.append(type(error))
    assert outcomes == [EXAMPLES[VoteRequest], InvalidMessageError, UnknownMessageTypeError, EXAMPLES[VoteRequest]]


# ---------------------------------------------------------------------------
# DescribeQuorum versions 1, 2 and 3 (issue 14): the version, not the arity
# ---------------------------------------------------------------------------

_DESCRIBE_V1_BODY = [0, 1, 7, 41, [[1, 43, 9000]], []]


def test_a_describe_quorum_body_must_have_its_versions_arity():
    assert _decode([37, 1, 5, CLUSTER, _DESCRIBE_V1_BODY]).message.repairing is None
    v2 = _decode([37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, "ENOSPC", False]]).message
    assert (v2.node_id, v2.disk_failure, v2.repairing, v2.version) == (1, "ENOSPC", False, 2)
    for envelope in (
        [37, 2, 5, CLUSTER, _DESCRIBE_V1_BODY],  # version 2 without its fields
        [37, 1, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, None, False]],  # version 1 with them
        [37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, "x" * 33, False]],  # an errno name too long
        [37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, "", False]],
        [37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, None, 1]],  # an int for a bool
        [37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, -1, None, False]],  # a negative node id
        [36, 2, 5, CLUSTER, [2]],  # a request body is empty in every version
        [37, 3, 5, CLUSTER, _DESCRIBE_V3_BODY[:9]],  # version 3 without repairing_voters
        [37, 2, 5, CLUSTER, [*_DESCRIBE_V1_BODY, 1, None, False, []]],  # version 2 with it
        [37, 3, 5, CLUSTER, [*_DESCRIBE_V3_BODY[:9], [2, 2]]],  # a voter twice
        [37, 3, 5, CLUSTER, [*_DESCRIBE_V3_BODY[:9], [-1]]],  # not a node id
        [37, 3, 5, CLUSTER, [*_DESCRIBE_V3_BODY[:9], None]],
    ):
        with pytest.raises(InvalidMessageError) as caught:
            _decode(envelope)
        assert caught.value.recoverable and caught.value.correlation_id == 5
    v3 = _decode([37, 3, 5, CLUSTER, [*_DESCRIBE_V3_BODY[:9], [2, 3]]]).message
    assert (v3.repairing_voters, v3.version, v2.repairing_voters) == ((2, 3), 3, None)
    with pytest.raises(UnsupportedVersionError):
        _decode([36, 4, 5, CLUSTER, []])


def test_a_fetch_says_repairing_only_when_it_is_and_old_bodies_read_as_not_repairing():
    """A Fetch of a node that does not repair is the body a peer that
    predates ``repairing`` decodes (9 fields); a repairing one adds
    ``true``; 8 and 9 fields read as not repairing."""
    plain = FetchRequest(src=2, dst=1, epoch=3, fetch_offset=10, last_fetched_epoch=3, request_id=1)
    for message, length in ((plain, 9), (replace(plain, repairing=True), 10)):
        frame = encode_message(message, correlation_id=1, cluster_id=CLUSTER)
        body = msgpack.unpackb(frame[4:])[4]
        assert len(body) == length
        assert decode_message(frame[4:], expected_cluster_id=CLUSTER).message == message
    head = [2, 1, 3, 10, 3, 1, 0, None]
    assert _decode([7, 1, 5, CLUSTER, head]).message.repairing is False
    assert _decode([7, 1, 5, CLUSTER, [*head, None]]).message.repairing is False
    assert _decode([7, 1, 5, CLUSTER, [*head, None, True]]).message.repairing is True
    with pytest.raises(InvalidMessageError):
        _decode([7, 1, 5, CLUSTER, [*head, None, 1]])  # an int for a bool
    with pytest.raises(InvalidMessageError):
        _decode([7, 1, 5, CLUSTER, [*head, None, True, 0]])  # a field too many


def test_a_brokers_fetch_is_the_body_every_release_decodes():
    """``observer`` is no body field (a broker's Hello carries it, and the
    receiving transport sets it): a broker's Fetch is the 9-field body a
    controller of any release decodes, which then reads as not marked."""
    fetch = FetchRequest(src=4, dst=1, epoch=3, fetch_offset=10, last_fetched_epoch=3, request_id=1, observer=True)
    frame = encode_message(fetch, correlation_id=1, cluster_id=CLUSTER)
    assert len(msgpack.unpackb(frame[4:])[4]) == 9
    assert decode_message(frame[4:], expected_cluster_id=CLUSTER).message == replace(fetch, observer=False)


_DESCRIBE_V3_BODY = [0, 1, 7, 41, [[1, 43, 9000, "d1"], [3, None, None, "d3"]], [[3, 40, 8990, "e3"]], 1, None, False, [3]]


def test_a_version_3_describe_quorum_answer_carries_each_replicas_directory_id():
    v3 = _decode([37, 3, 5, CLUSTER, _DESCRIBE_V3_BODY]).message
    assert [(r.node_id, r.directory_id) for r in v3.voters] == [(1, "d1"), (3, "d3")]
    assert [(r.node_id, r.log_end_offset, r.directory_id) for r in v3.observers] == [(3, 40, "e3")]
    assert v3.repairing_voters == (3,)
    # In version 2 the same replicas travel without their directory ids.
    frame = encode_message(dataclasses.replace(v3, version=2), correlation_id=5, cluster_id=CLUSTER)
    assert [r.directory_id for r in decode_message(frame[4:], expected_cluster_id=CLUSTER).message.voters] == [None, None]
    voters = _DESCRIBE_V3_BODY[4]
    for bad_voters in (
        [[1, 43, 9000]],  # a version-2 row in version 3
        [[1, 43, 9000, "d1", None]],
        [[1, 43, 9000, ""]],  # an empty directory id
        [[1, 43, 9000, "x" * 65]],  # longer than any directory id
        [[1, 43, 9000, "d/1"]],  # a character no directory id has
        [[1, 43, 9000, 7]],
        [*voters, [1, None, None, "d9"]],  # a node twice
    ):
        with pytest.raises(InvalidMessageError) as caught:
            _decode([37, 3, 5, CLUSTER, [*_DESCRIBE_V3_BODY[:4], bad_voters, *_DESCRIBE_V3_BODY[5:]]])
        assert caught.value.recoverable and caught.value.correlation_id == 5


def test_a_version_1_describe_quorum_answer_leaves_the_version_2_fields_out():
    frame = encode_message(
        DescribeQuorumResponse(epoch=3, node_id=2, disk_failure="EIO", repairing=True, version=1),
        correlation_id=1,
        cluster_id=CLUSTER,
    )
    decoded = decode_message(frame[4:], expected_cluster_id=CLUSTER)
    assert decoded.version == 1 and decoded.message.epoch == 3
    assert (decoded.message.node_id, decoded.message.disk_failure, decoded.message.repairing) == (None, None, None)
    with pytest.raises(ValueError, match="repairing"):
        DescribeQuorumResponse(repairing=None)  # version 2 always says
