"""Hypothesis strategies producing valid wire messages of every type, and
representative fixed examples of each."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from quorum import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Entry,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    RecordKind,
    ReplicaDescription,
    SnapshotId,
    VoteRequest,
    VoteResponse,
    Voter,
    VoterSet,
)
from quorum.wire import (
    HELLO_ROLES,
    READ_MODES,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorFrame,
    Hello,
    ProposeRequest,
    ProposeResponse,
    ApplicationRequest,
    ApplicationResponse,
    ReadRequest,
    ReadResponse,
    AddVoterRequest,
    RemoveVoterRequest,
    UpgradeVotersRequest,
    VoterChangeResponse,
)

NODE_ID_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Edge values are drawn often: hypothesis shrinks towards them anyway, and
# the range ends are where a codec breaks.
node_ids = st.integers(0, NODE_ID_MAX) | st.sampled_from([0, 1, NODE_ID_MAX])
optional_node_ids = st.none() | node_ids
int64s = st.integers(0, INT64_MAX) | st.sampled_from([0, 1, 2**32, INT64_MAX])
EPOCH_MAX = 2**31 - 1
epochs = st.integers(0, EPOCH_MAX) | st.sampled_from([0, 1, EPOCH_MAX])
optional_int64s = st.none() | int64s
error_codes = st.sampled_from(list(ErrorCode))
failure_codes = st.sampled_from([code for code in ErrorCode if code is not ErrorCode.NONE])
cluster_ids = st.text(min_size=1, max_size=255)
correlation_ids = int64s

msgpack_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
# KIP-853 directory ids: nil, or 1..64 letters, digits, '-' and '_'.
directory_ids = st.none() | st.text("abcdefABCDEF0123456789-_", min_size=1, max_size=64)
# A plain msgpack value as an extension decodes back to (lists, not tuples).
extensions = st.recursive(
    msgpack_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.binary(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _entry(draw, offset: int, epoch: int, kind: RecordKind) -> Entry:
    """A record whose payload its kind allows: a VOTERS record holds a
    voter set (the wire refuses anything else)."""
    if kind is RecordKind.VOTERS:
        ids = draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True))
        voters = VoterSet(tuple(Voter(node_id, draw(directory_ids), ("h:1",)) for node_id in ids))
        return Entry(offset, epoch, kind, voters.encode())
    return Entry(offset, epoch, kind, draw(st.binary(max_size=40)))


@st.composite
def records(draw, epoch_max: int) -> tuple[Entry, ...]:
    count = draw(st.integers(0, 8))
    start = draw(st.integers(0, INT64_MAX - count) | st.just(0))
    epochs = sorted(draw(st.lists(st.integers(0, epoch_max), min_size=count, max_size=count)))
    return tuple(
        _entry(draw, start + index, epoch, draw(st.sampled_from(list(RecordKind)))) for index, epoch in enumerate(epochs)
    )


snapshot_ids = st.builds(SnapshotId, int64s, epochs)
offsets_and_epochs = st.builds(OffsetAndEpoch, epochs, int64s)


def _quorum_fields(**more):
    return dict(src=node_ids, dst=node_ids, epoch=epochs, **more)


vote_requests = st.builds(
    VoteRequest,
    **_quorum_fields(last_epoch=epochs, end_offset=int64s, pre_vote=st.booleans(), voter_directory_id=directory_ids),
)
vote_responses = st.builds(
    VoteResponse,
    **_quorum_fields(granted=st.booleans(), pre_vote=st.booleans(), leader_id=optional_node_ids, error=error_codes),
)
begin_quorum_epoch_requests = st.builds(BeginQuorumEpochRequest, **_quorum_fields())
begin_quorum_epoch_responses = st.builds(BeginQuorumEpochResponse, **_quorum_fields(error=error_codes))
end_quorum_epoch_requests = st.builds(
    EndQuorumEpochRequest,
    **_quorum_fields(preferred_successors=st.lists(node_ids, unique=True, max_size=7).map(tuple)),
)
end_quorum_epoch_responses = st.builds(EndQuorumEpochResponse, **_quorum_fields(error=error_codes))
fetch_requests = st.builds(
    FetchRequest,
    **_quorum_fields(
        fetch_offset=int64s,
        last_fetched_epoch=epochs,
        request_id=int64s,
        read_token=int64s,
        extension=st.none() | extensions,
        directory_id=directory_ids,
        repairing=st.booleans(),
    ),
)


# Where a NOT_LEADER answer says the leader listens: HOST:PORT, port 1..65535.
leader_endpoints = st.builds(
    lambda host, port: f"{host}:{port}",
    st.sampled_from(["127.0.0.1", "node-4.example", "[::1]", "h" * 240]),
    st.integers(1, 65535),
)
leader_hint_versions = st.sampled_from([1, 2])


def _with_leader_fields(responses):
    """Answers that may say NOT_LEADER, in version 1 (no leader epoch or
    endpoint on the wire) or version 2 (either, both or neither)."""
    return st.one_of(
        responses.map(lambda m: dataclasses.replace(m, version=1)),
        st.builds(
            lambda m, epoch, endpoint: dataclasses.replace(m, leader_epoch=epoch, leader_endpoint=endpoint, version=2),
            responses,
            st.none() | epochs,
            st.none() | leader_endpoints,
        ),
    )


@st.composite
def fetch_responses(draw) -> FetchResponse:
    epoch = draw(epochs)
    return FetchResponse(
        src=draw(node_ids),
        dst=draw(node_ids),
        epoch=epoch,
        request_id=draw(int64s),
        leader_id=draw(optional_node_ids),
        error=draw(error_codes),
        high_watermark=draw(int64s),
        log_start_offset=draw(int64s),
        records=draw(records(epoch)),
        diverging=draw(st.none() | offsets_and_epochs),
        snapshot_id=draw(st.none() | snapshot_ids),
        read_token=draw(int64s),
        extension=draw(st.none() | extensions),
        leader_endpoint=draw(st.none() | leader_endpoints),
    )


fetch_snapshot_requests = st.builds(
    FetchSnapshotRequest, **_quorum_fields(snapshot_id=snapshot_ids, position=int64s, request_id=int64s)
)


@st.composite
def fetch_snapshot_responses(draw) -> FetchSnapshotResponse:
    chunk = draw(st.binary(max_size=64))
    position = draw(st.integers(0, 2**40))
    return FetchSnapshotResponse(
        src=draw(node_ids),
        dst=draw(node_ids),
        epoch=draw(epochs),
        request_id=draw(int64s),
        leader_id=draw(optional_node_ids),
        error=draw(error_codes),
        snapshot_id=draw(st.none() | snapshot_ids),
        position=position,
        size=position + len(chunk) + draw(st.integers(0, 2**40)),
        chunk=chunk,
    )


error_frames = st.builds(
    ErrorFrame,
    code=failure_codes,
    message=st.text(max_size=100),
    correlation_id=optional_int64s,
)
hellos = st.one_of(
    st.builds(Hello, node_id=optional_node_ids, role=st.just("client")),
    st.builds(Hello, node_id=node_ids, role=st.sampled_from(HELLO_ROLES)),
)
propose_requests = st.builds(
    ProposeRequest, records=st.lists(st.binary(max_size=40), min_size=1, max_size=8).map(tuple), version=leader_hint_versions
)
propose_responses = _with_leader_fields(st.one_of(
    st.builds(
        ProposeResponse,
        error=st.just(ErrorCode.NONE),
        offset=int64s,
        leader_hint=optional_node_ids,
        results=st.lists(st.one_of(st.none(), st.binary(max_size=8)), max_size=4).map(tuple),
    ),
    st.builds(ProposeResponse, error=failure_codes, offset=optional_int64s, leader_hint=optional_node_ids),
))
read_requests = st.builds(
    ReadRequest, mode=st.sampled_from(READ_MODES), query=st.binary(max_size=40), version=leader_hint_versions
)
read_responses = _with_leader_fields(st.one_of(
    st.builds(
        ReadResponse,
        error=st.just(ErrorCode.NONE),
        offset=int64s,
        leader_hint=optional_node_ids,
        value=st.none() | st.binary(max_size=40),
    ),
    st.builds(ReadResponse, error=failure_codes, offset=optional_int64s, leader_hint=optional_node_ids),
))
describe_quorum_requests = st.builds(DescribeQuorumRequest, version=st.sampled_from([1, 2]))


@st.composite
def _replicas(draw, with_directories: bool = False) -> tuple[ReplicaDescription, ...]:
    ids = draw(st.lists(node_ids, unique=True, max_size=5))
    return tuple(
        ReplicaDescription(
            node_id, draw(optional_int64s), draw(optional_int64s), draw(directory_ids) if with_directories else None
        )
        for node_id in ids
    )


describe_quorum_responses = st.one_of(
    # Version 1 carries no node id or storage conditions (decoded: repairing None).
    st.builds(
        DescribeQuorumResponse,
        error=error_codes,
        leader_id=optional_node_ids,
        epoch=epochs,
        high_watermark=int64s,
        voters=_replicas(),
        observers=_replicas(),
        repairing=st.none(),
        repairing_voters=st.none(),
        version=st.just(1),
    ),
    st.builds(
        DescribeQuorumResponse,
        error=error_codes,
        leader_id=optional_node_ids,
        epoch=epochs,
        high_watermark=int64s,
        voters=_replicas(),
        observers=_replicas(),
        node_id=optional_node_ids,
        disk_failure=st.none() | st.sampled_from(["ENOSPC", "EIO", "EDQUOT"]) | st.text(min_size=1, max_size=32),
        repairing=st.booleans(),
        repairing_voters=st.none(),
        version=st.just(2),
    ),
    # Version 3: each replica with its directory id (KIP-853), and a leader's repairing voters.
    st.builds(
        DescribeQuorumResponse,
        error=error_codes,
        leader_id=optional_node_ids,
        epoch=epochs,
        high_watermark=int64s,
        voters=_replicas(True),
        observers=_replicas(True),
        node_id=optional_node_ids,
        disk_failure=st.none() | st.sampled_from(["ENOSPC", "EIO"]),
        repairing=st.booleans(),
        repairing_voters=st.lists(node_ids, unique=True, max_size=7).map(tuple),
        version=st.just(3),
    ),
)
endpoints = st.lists(
    st.builds(lambda host, port: f"{host}:{port}", st.sampled_from(["127.0.0.1", "node-4.example", "[::1]"]), st.integers(0, 65535)),
    max_size=8,
).map(tuple)
add_voter_requests = st.one_of(
    st.builds(AddVoterRequest, node_id=node_ids, directory_id=directory_ids, endpoints=endpoints, version=st.just(1)),
    # Version 2: marked as auto-join (or not); its answer names the leader.
    st.builds(
        AddVoterRequest, node_id=node_ids, directory_id=directory_ids, endpoints=endpoints, auto_join=st.booleans(),
        version=st.just(2),
    ),
)
remove_voter_requests = st.builds(RemoveVoterRequest, node_id=node_ids, directory_id=directory_ids, version=leader_hint_versions)
voter_change_responses = _with_leader_fields(st.one_of(
    st.builds(VoterChangeResponse, error=st.just(ErrorCode.NONE), offset=optional_int64s),
    st.builds(
        VoterChangeResponse,
        error=failure_codes,
        leader_hint=optional_node_ids,
        offset=optional_int64s,
        message=st.text(max_size=80),
    ),
))

STRATEGIES = {
    VoteRequest: vote_requests,
    VoteResponse: vote_responses,
    BeginQuorumEpochRequest: begin_quorum_epoch_requests,
    BeginQuorumEpochResponse: begin_quorum_epoch_responses,
    EndQuorumEpochRequest: end_quorum_epoch_requests,
    EndQuorumEpochResponse: end_quorum_epoch_responses,
    FetchRequest: fetch_requests,
    FetchResponse: fetch_responses(),
    FetchSnapshotRequest: fetch_snapshot_requests,
    FetchSnapshotResponse: fetch_snapshot_responses(),
    ErrorFrame: error_frames,
    Hello: hellos,
    ProposeRequest: propose_requests,
    ProposeResponse: propose_responses,
    ReadRequest: read_requests,
    ReadResponse: read_responses,
    DescribeQuorumRequest: describe_quorum_requests,
    DescribeQuorumResponse: describe_quorum_responses,
    AddVoterRequest: add_voter_requests,
    RemoveVoterRequest: remove_voter_requests,
    UpgradeVotersRequest: st.builds(UpgradeVotersRequest, version=leader_hint_versions),
    VoterChangeResponse: voter_change_responses,
    ApplicationRequest: st.builds(ApplicationRequest, payload=st.binary(max_size=64), version=leader_hint_versions),
    ApplicationResponse: _with_leader_fields(
        st.builds(
            ApplicationResponse,
            error=st.sampled_from(list(ErrorCode)),
            leader_hint=optional_node_ids,
            payload=st.binary(max_size=64),
        )
    ),
}
any_message = st.one_of(list(STRATEGIES.values()))

# One representative message of each type, as the running system sends them.
_LEADER_RECORDS = (
    Entry(40, 6, RecordKind.LEADER_CHANGE, b""),
    Entry(41, 7, RecordKind.LEADER_CHANGE, b""),
    Entry(42, 7, RecordKind.DATA, b"register broker 4"),
)
EXAMPLES = {
    VoteRequest: VoteRequest(src=2, dst=1, epoch=8, last_epoch=7, end_offset=43, pre_vote=True),
    VoteResponse: VoteResponse(src=1, dst=2, epoch=7, granted=False, pre_vote=True, leader_id=3),
    BeginQuorumEpochRequest: BeginQuorumEpochRequest(src=1, dst=2, epoch=7),
    BeginQuorumEpochResponse: BeginQuorumEpochResponse(src=2, dst=1, epoch=7),
    EndQuorumEpochRequest: EndQuorumEpochRequest(src=1, dst=2, epoch=7, preferred_successors=(3, 2)),
    EndQuorumEpochResponse: EndQuorumEpochResponse(src=2, dst=1, epoch=8, error=ErrorCode.FENCED_LEADER_EPOCH),
    FetchRequest: FetchRequest(
        src=4,
        dst=1,
        epoch=7,
        fetch_offset=40,
        last_fetched_epoch=6,
        request_id=12,
        read_token=3,
        extension={"broker_id": 4, "broker_epoch": 17, "state": "online", "partitions": [[b"t", 0]]},
        repairing=True,
    ),
    FetchResponse: FetchResponse(
        src=1,
        dst=4,
        epoch=7,
        request_id=12,
        leader_id=1,
        high_watermark=41,
        log_start_offset=10,
        records=_LEADER_RECORDS,
        read_token=4,
        extension={"ok": True},
        leader_endpoint="127.0.0.1:9091",
    ),
    FetchSnapshotRequest: FetchSnapshotRequest(
        src=4, dst=1, epoch=7, snapshot_id=SnapshotId(1000, 6), position=4096, request_id=13
    ),
    FetchSnapshotResponse: FetchSnapshotResponse(
        src=1,
        dst=4,
        epoch=7,
        request_id=13,
        leader_id=1,
        snapshot_id=SnapshotId(1000, 6),
        position=4096,
        size=5000,
        chunk=b"\x00\x01snapshot bytes",
    ),
    ErrorFrame: ErrorFrame(code=ErrorCode.INVALID_REQUEST, message="FetchRequest epoch must be...", correlation_id=9),
    Hello: Hello(node_id=4, role="observer"),
    ProposeRequest: ProposeRequest(records=(b"put a 1", b"put b 2")),
    ProposeResponse: ProposeResponse(offset=42),
    ApplicationRequest: ApplicationRequest(payload=b"\x92\xa4ping\x90"),
    ApplicationResponse: ApplicationResponse(payload=b"\x92\xa4pong\x90"),
    ReadRequest: ReadRequest(mode="leader-local", query=b"a"),
    ReadResponse: ReadResponse(offset=42, value=b"1"),
    DescribeQuorumRequest: DescribeQuorumRequest(),
    AddVoterRequest: AddVoterRequest(node_id=4, directory_id="9f1c2e4a7b3d4c5e8f9a0b1c2d3e4f50", endpoints=("127.0.0.1:9094",)),
    RemoveVoterRequest: RemoveVoterRequest(node_id=3, directory_id="0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
    UpgradeVotersRequest: UpgradeVotersRequest(),
    VoterChangeResponse: VoterChangeResponse(
        error=ErrorCode.VOTER_NOT_CAUGHT_UP,
        leader_hint=1,
        message="node 4 is not caught up: its log ends at 12, the high watermark is 41",
    ),
    DescribeQuorumResponse: DescribeQuorumResponse(
        leader_id=1,
        epoch=7,
        high_watermark=41,
        voters=(
            ReplicaDescription(1, 43, 9000, "5b7e0c2d9a8f4e61b3c2d1e0f9a8b7c6"),
            ReplicaDescription(2, 41, 8990, "c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8"),
            ReplicaDescription(3, None, None, "0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
        ),
        observers=(ReplicaDescription(3, 40, 8995, "9f1c2e4a7b3d4c5e8f9a0b1c2d3e4f50"),),
        node_id=1,
        disk_failure="ENOSPC",
        repairing=False,
        repairing_voters=(3,),
    ),
}
