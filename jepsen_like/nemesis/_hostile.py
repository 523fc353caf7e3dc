"""Hostile clients: traffic a node must survive without losing its
leadership, its memory or its well-behaved clients (issue 15).

One attack is an ``async`` function that sends one kind of bad traffic at
one node's listener until it is cancelled (the caller bounds it with
``run_attack(..., duration_s)``). The same builders serve the abuse
benchmark (``bench/abuse_bench.py``, one attack at a time against the
leader, with a timed client writing alongside) and the campaign's
``hostile-clients`` scenario (``HOSTILE_KINDS``: groups of attacks run
together against a member, recorded in the history as nemesis faults).

Every attack is bounded on the attacker's side too: a fixed number of
connections, a pace between rounds, and reads that give up after a short
time, so that a run measures the node and not a runaway harness.

Attacks (``ATTACKS``):

- ``forged-epoch``: a VoteRequest whose epoch and last epoch are 2**32 + 1,
  above what a node stores (before the fix: granted, persisted, and the
  cluster never elected a leader again);
- ``forged-fields``: quorum messages with other out-of-range fields (a
  negative epoch or offset, a node id above 2**31, a bool that is an int);
- ``vote-flood``: Votes and pre-votes of rising epochs, each claiming
  another voter as its sender (the leader lease must ignore them);
- ``connection-flood``: connections past the per-address cap, held open;
- ``stalled-frames``: many connections each holding a started frame just
  under the small-frame limit, never finished;
- ``pipelined``: one client sending proposals without ever reading an
  answer;
- ``bomb-16mib``: a 16 MiB frame of empty msgpack maps (a request: refused
  from its first bytes);
- ``bomb-fetch-extension``: a Fetch whose extension is ~1 MiB of empty
  maps (the largest request a node reads; its container count is bounded);
- ``random-bytes``: random bytes on fresh connections;
- ``huge-length``: length prefixes of 4 GiB and 16 MiB;
- ``malformed``: frames whose payload is not msgpack, not an envelope, of
  an unknown type or version;
- ``wrong-cluster``: well-formed requests for another cluster id;
- ``unknown-voter``: a Hello as a voter id the cluster does not have, then
  Votes and Fetches from it.

One more attack runs only as an attacker with a certificate
(``AUTHENTICATED_ATTACKS``, added to the ``forged-field`` kind when
``HostileTarget.tls`` is set, ``attacks_of``):

- ``voter-impostor``: well-formed member-only messages (a Vote, a pre-vote,
  a BeginQuorumEpoch of the next epoch, a Fetch) each claiming another
  voter's id as its sender. Over TLS, authorization refuses every one
  (a client principal sends no Raft message). In the clear nothing tells
  them from that voter's own (the protocol does not authenticate peers:
  docs/nemesis.md, "Hostile clients"), so a plaintext run does not send
  them.

The source address: on loopback, every legitimate peer and client of a
test cluster connects from 127.0.0.1, so ``HostileTarget.source_host``
(for example ``127.0.0.66``, any 127/8 address binds on Linux) lets the
attacker be a different address, as it would be on a real network: a
per-address cap then limits the attacker, not everyone.

The attacker's certificate: against a node that requires mutual TLS, an
attacker without one (``HostileTarget.tls`` None) is refused at the
handshake, so every attack above only tests that refusal. With
``HostileTarget.tls`` (a ``quorum.runtime.TlsConfig`` holding a client
certificate from the cluster's own CA: a compromised or buggy client) each
connection completes the handshake first, and the same bytes reach the
node's frame decoder through TLS; what only members may send (a Vote, a
BeginQuorumEpoch, a Fetch under a voter's id) must then be refused by
authorization, each with a CLUSTER_AUTHORIZATION_FAILED ErrorFrame
(``HostileStats.authorization_refusals``). A handshake that fails is
counted (``handshake_failures``), never raised out of the attack.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import trio

from quorum import BeginQuorumEpochRequest, ErrorCode, FetchRequest, VoteRequest
from quorum.runtime import HANDSHAKE_TIMEOUT_S, TlsConfig
from quorum.wire import (
    NODE_LIMITS,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorFrame,
    FrameDecoder,
    Hello,
    ProposeRequest,
    RemoteProtocolError,
    decode_message,
    encode_message,
)

# Message type codes on the wire (quorum/wire/_schema.py; forever fixed).
_VOTE_REQUEST = 1
_BEGIN_QUORUM_EPOCH_REQUEST = 3
_FETCH_REQUEST = 7
_PROPOSE_REQUEST = 32
_PROTOCOL_VERSION = 1

#: A voter id no test cluster has (clusters number voters from 1).
UNKNOWN_VOTER_ID = 4242
#: How long an attack waits for the node's answer or close, per connection.
ANSWER_WAIT_S = 1.0
#: How long one exchange may take to connect (loopback or a namespace's
#: veth: far less, unless the node's packets are dropped).
ONE_SHOT_CONNECT_S = 2.0
#: How long the voter impostor waits for its four refusals (it stops as
#: soon as they are in): every frame it sends must be answered.
IMPOSTOR_ANSWER_WAIT_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HostileTarget:
    """The node under attack and what an attacker could know of it: its
    address, id, the voters' ids and the cluster id (all public: any
    client's DescribeQuorum says them).

    ``source_host``: the local address attack sockets bind to (None: the
    system's choice). ``tls``: the attacker's own client certificate (and
    the CA it trusts); every connection then starts with a TLS handshake
    (None: the attacker speaks in the clear)."""

    host: str
    port: int
    node_id: int
    voter_ids: tuple[int, ...]
    cluster_id: str
    source_host: str | None = None
    tls: TlsConfig | None = None

    @property
    def authenticated(self) -> bool:
        """Whether the attacker presents a certificate."""
        return self.tls is not None

    def other_voters(self) -> list[int]:
        return [voter for voter in self.voter_ids if voter != self.node_id] or [self.node_id]


@dataclass(slots=True)
class HostileStats:
    """What one attack did, and how the node answered it."""

    attack: str
    connections: int = 0
    connect_failures: int = 0
    frames: int = 0
    bytes_sent: int = 0
    # Connections the node closed (or reset) while we still meant to use them.
    closed_by_node: int = 0
    error_frames: int = 0
    # Answers that were not pykraft frames at all: a TLS node's alert to a
    # client that did not start a handshake (a campaign run with --tls: the
    # attacker has no certificate, so every attack ends there).
    unframed_answers: int = 0
    # TLS handshakes that did not complete on the attacker's side (an
    # attacker with a certificate: the node's certificate not trusted, the
    # connection closed or reset during it, or too slow). A node refusing
    # the attacker's certificate is not among them: in TLS 1.3 the client's
    # side completes before the server checks it, so that refusal arrives
    # at the first read, as a close (``closed_by_node``).
    handshake_failures: int = 0
    # ErrorFrames whose code is CLUSTER_AUTHORIZATION_FAILED (also counted in
    # ``error_frames``): the attacker's principal may not send what it sent.
    authorization_refusals: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_history_value(self) -> dict[str, Any]:
        value = {
            "attack": self.attack,
            "connections": self.connections,
            "connect_failures": self.connect_failures,
            "frames": self.frames,
            "bytes_sent": self.bytes_sent,
            "closed_by_node": self.closed_by_node,
            "error_frames": self.error_frames,
            "unframed_answers": self.unframed_answers,
            "handshake_failures": self.handshake_failures,
            "authorization_refusals": self.authorization_refusals,
        }
        value.update(self.extra)
        return value


Attack = Callable[[HostileTarget, HostileStats, random.Random], Awaitable[None]]


# =========================================================================
# Frames, good and forged
# =========================================================================


def frame(message: Any, target: HostileTarget, correlation_id: int = 1, cluster_id: str | None = None) -> bytes:
    """A well-formed frame carrying ``message`` (the encoder checks it)."""
    return encode_message(message, correlation_id=correlation_id, cluster_id=cluster_id or target.cluster_id)


def raw_frame(payload: bytes) -> bytes:
    """``payload`` behind a 4-byte big-endian length prefix, unchecked."""
    return len(payload).to_bytes(4, "big") + payload


def forged_frame(type_code: int, body: list[Any], cluster_id: str, correlation_id: int = 9) -> bytes:
    """A frame with an arbitrary ``body`` the encoder would refuse to send
    (out-of-range fields): the envelope ``[type, version, correlation id,
    cluster id, body]`` packed by hand."""
    return raw_frame(msgpack.packb([type_code, _PROTOCOL_VERSION, correlation_id, cluster_id, body], use_bin_type=True))


def forged_epoch_vote(target: HostileTarget, epoch: int = 2**32 + 1) -> bytes:
    """A VoteRequest to ``target`` claiming another voter as its sender, an
    up-to-date log and ``epoch`` (above the int32 a node stores)."""
    claimed = target.other_voters()[0]
    return forged_frame(_VOTE_REQUEST, [claimed, target.node_id, epoch, epoch, 10**6, False], target.cluster_id)


def forged_field_frames(target: HostileTarget) -> list[bytes]:
    """Quorum messages each with one field out of its range or type."""
    claimed = target.other_voters()[0]
    me = target.node_id
    return [
        forged_epoch_vote(target),
        forged_frame(_VOTE_REQUEST, [claimed, me, -1, 0, 0, False], target.cluster_id),
        forged_frame(_VOTE_REQUEST, [claimed, me, 1, 1, -5, False], target.cluster_id),
        forged_frame(_VOTE_REQUEST, [2**40, me, 1, 1, 0, False], target.cluster_id),
        forged_frame(_VOTE_REQUEST, [claimed, me, 1, 1, 0, 1], target.cluster_id),
        forged_frame(_BEGIN_QUORUM_EPOCH_REQUEST, [claimed, me, 2**63], target.cluster_id),
        forged_frame(_FETCH_REQUEST, [claimed, me, 1, -1, 0, 1, 0, None], target.cluster_id),
        forged_frame(_FETCH_REQUEST, [claimed, me, 1, 0, 0, 2**64 - 1, 0, None], target.cluster_id),
        forged_frame(_PROPOSE_REQUEST, [["not", "bytes"]], target.cluster_id),
    ]


def vote_flood_frame(target: HostileTarget, epoch: int, count: int) -> bytes:
    """The ``count``-th forged Vote of a flood: alternately a pre-vote and a
    vote, each claiming one of the other voters, an up-to-date log."""
    others = target.other_voters()
    request = VoteRequest(
        src=others[count % len(others)],
        dst=target.node_id,
        epoch=epoch,
        last_epoch=epoch,
        end_offset=1_000_000,
        pre_vote=count % 2 == 1,
    )
    return frame(request, target, correlation_id=count + 1)


def msgpack_bomb(
    size_bytes: int, cluster_id: str, *, in_fetch_extension: bool, src: int = UNKNOWN_VOTER_ID, dst: int = 1, item: bytes = b"\x80"
) -> bytes:
    """A frame of about ``size_bytes`` that is mostly copies of the msgpack
    value ``item`` (default an empty map: one byte on the wire, ~70 bytes
    once decoded in Python). ``in_fetch_extension``: a well-formed
    FetchRequest whose extension is the array of them; else a request body
    that is the array itself."""
    count = max(1, (size_bytes - 100) // len(item))
    bomb_array = b"\xdd" + count.to_bytes(4, "big") + item * count
    head = msgpack.packb([_FETCH_REQUEST if in_fetch_extension else _PROPOSE_REQUEST, _PROTOCOL_VERSION, 1, cluster_id])
    # Drop the 4-array header of ``head``: the envelope has five items.
    envelope = b"\x95" + head[1:]
    if in_fetch_extension:
        fields_but_extension = msgpack.packb([src, dst, 1, 0, 0, 1, 0])
        body = b"\x98" + fields_but_extension[1:] + bomb_array
    else:
        body = b"\x91" + bomb_array
    return raw_frame(envelope + body)


def malformed_frames(target: HostileTarget, rng: random.Random) -> list[bytes]:
    """Frames whose length is right and whose payload is not a message."""
    cluster = target.cluster_id
    return [
        raw_frame(b"\xc1" * 16),  # 0xc1: never valid msgpack
        raw_frame(msgpack.packb({"hello": "world"})),  # not an envelope
        raw_frame(msgpack.packb([_VOTE_REQUEST, _PROTOCOL_VERSION, 1])),  # too short
        raw_frame(msgpack.packb([200, _PROTOCOL_VERSION, 1, cluster, []])),  # unknown type
        raw_frame(msgpack.packb([_VOTE_REQUEST, 99, 1, cluster, []])),  # unknown version
        raw_frame(msgpack.packb([_VOTE_REQUEST, _PROTOCOL_VERSION, 1, cluster, [1, 2]])),  # body too short
        raw_frame(msgpack.packb([_VOTE_REQUEST, _PROTOCOL_VERSION, 1, cluster, [1, 2, 3, 4, 5, 6]])[:-3]),  # truncated
        raw_frame(b""),  # an empty frame
        raw_frame(rng.randbytes(rng.randrange(1, 512))),
    ]


def pipelined_proposal(index: int) -> bytes:
    """One record a hostile client pipelines: raw bytes that no state
    machine of the project decodes (the key-value machine and the
    controller's image skip them) and that carry no write id."""
    return b"hostile-pipelined-%d-" % index + b"x" * 160


# =========================================================================
# Connections
# =========================================================================


async def open_connection(target: HostileTarget, stats: HostileStats) -> trio.abc.Stream | None:
    """A connection to ``target`` (None, counted, when it cannot be made:
    a node down or refusing). With ``target.tls``, a TLS connection whose
    handshake has completed on this side (None, counted in
    ``handshake_failures``, when it did not: the node's certificate is not
    trusted, the node closed or reset the connection, or it took longer
    than ``HANDSHAKE_TIMEOUT_S``; a node that refuses this certificate
    closes the connection after, which the first read sees)."""
    try:
        tcp = await trio.open_tcp_stream(target.host, target.port, local_address=target.source_host)
    except OSError:
        stats.connect_failures += 1
        await trio.sleep(0.1)
        return None
    stats.connections += 1
    if target.tls is None:
        return tcp
    # The project's own client side of TLS (quorum.runtime.TlsStream), over
    # the socket bound to ``source_host`` (TlsConfig.connect binds none).
    # No session ticket is offered: each connection makes a full handshake.
    secure = target.tls.wrap_client(tcp)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await secure.do_handshake()
    except (trio.BrokenResourceError, trio.TooSlowError, OSError):
        stats.handshake_failures += 1
        await trio.aclose_forcefully(secure)
        await trio.sleep(0.1)
        return None
    except BaseException:
        await trio.aclose_forcefully(secure)
        raise
    return secure


async def send(stream: trio.abc.Stream, data: bytes, stats: HostileStats, frames: int = 1) -> bool:
    """Send ``data``; False (counted) when the node closed the connection."""
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        stats.closed_by_node += 1
        return False
    stats.bytes_sent += len(data)
    stats.frames += frames
    return True


async def read_answers(
    stream: trio.abc.Stream, stats: HostileStats, cluster_id: str, wait_s: float = ANSWER_WAIT_S, *, expect: int | None = None
) -> list[Any]:
    """Messages the node sends back within ``wait_s`` (ErrorFrames counted);
    stops early when the node closes the connection (counted), when what
    comes back is not framed as pykraft frames are (counted: a TLS node's
    alert), or once ``expect`` messages have come."""
    decoder = FrameDecoder()
    answers: list[Any] = []
    with trio.move_on_after(wait_s):
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                stats.closed_by_node += 1
                break
            decoder.feed(data)
            try:
                while (payload := decoder.next_frame()) is not None:
                    try:
                        message = decode_message(payload, expected_cluster_id=cluster_id).message
                    except RemoteProtocolError:
                        continue
                    if isinstance(message, ErrorFrame):
                        stats.error_frames += 1
                        if message.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                            stats.authorization_refusals += 1
                    answers.append(message)
            except RemoteProtocolError:
                # A length prefix no frame has (a TLS record's header reads
                # as hundreds of MiB): nothing after it can be read as frames.
                stats.unframed_answers += 1
                break
            if expect is not None and len(answers) >= expect:
                break
    return answers


async def one_shot(
    target: HostileTarget, stats: HostileStats, data: bytes, frames: int = 1, wait_s: float = ANSWER_WAIT_S, expect: int | None = None
) -> None:
    """A fresh connection: send ``data``, read what comes back (until the
    node closes it, ``expect`` answers came, or ``wait_s``), close.

    The exchange is finished whole even when the attack's time ends in the
    middle of it, so every frame counted as sent has its answer read or its
    absence counted as the node's (CI, 2026-11-27: a run cut between the
    send and the read showed four frames unanswered for no fault of the
    node). Bounded: a node that never answers costs one connect, one
    handshake and one answer wait."""
    bound_s = ONE_SHOT_CONNECT_S + (HANDSHAKE_TIMEOUT_S if target.tls is not None else 0.0) + wait_s
    with trio.CancelScope(shield=True), trio.move_on_after(bound_s):
        stream = await open_connection(target, stats)
        if stream is None:
            return
        try:
            if await send(stream, data, stats, frames):
                await read_answers(stream, stats, target.cluster_id, wait_s, expect=expect)
        finally:
            await trio.aclose_forcefully(stream)


async def current_epoch(target: HostileTarget) -> int:
    """The epoch the node says it is in (0 when it does not say): what any
    client can learn with a DescribeQuorum (over TLS with ``target.tls``:
    describing is what every authenticated principal may do)."""
    with trio.move_on_after(2.0 + (HANDSHAKE_TIMEOUT_S if target.tls is not None else 0.0)):
        stream = await open_connection(target, HostileStats("describe"))
        if stream is None:
            return 0
        try:
            await stream.send_all(frame(DescribeQuorumRequest(), target, correlation_id=1))
            answers = await read_answers(stream, HostileStats("describe"), target.cluster_id, 2.0, expect=1)
        finally:
            await stream.aclose()
        for answer in answers:
            if isinstance(answer, DescribeQuorumResponse):
                return answer.epoch
    return 0


# =========================================================================
# The attacks
# =========================================================================


async def forged_epoch(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    while True:
        await one_shot(target, stats, forged_epoch_vote(target), expect=1)
        await trio.sleep(0.2)


async def forged_fields(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    forged = forged_field_frames(target)
    while True:
        # One connection per round: a node answers a bad field with an
        # ErrorFrame and keeps the connection, or closes it.
        await one_shot(target, stats, b"".join(forged), frames=len(forged), expect=len(forged))
        await trio.sleep(0.2)


async def vote_flood(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    epoch = await current_epoch(target)
    stats.extra["epoch_at_start"] = epoch
    count = 0
    while True:
        stream = await open_connection(target, stats)
        if stream is None:
            continue
        async with stream:
            # Votes are answered to the voter they claim to come from, not
            # on this connection: nothing to read here but a close.
            while True:
                burst = []
                for _ in range(8):
                    epoch += 1
                    count += 1
                    burst.append(vote_flood_frame(target, epoch, count))
                stats.extra["epoch_claimed_max"] = epoch
                if not await send(stream, b"".join(burst), stats, frames=len(burst)):
                    break
                await trio.sleep(0.002)


async def connection_flood(target: HostileTarget, stats: HostileStats, rng: random.Random, count: int = 300) -> None:
    """``count`` connections held open (past the default per-address cap of
    256); those the node closes are opened again, once a second."""
    held: list[trio.abc.Stream] = []
    try:
        while True:
            while len(held) < count:
                stream = await open_connection(target, stats)
                if stream is None:
                    break
                held.append(stream)
            await trio.sleep(1.0)
            closed: list[trio.abc.Stream] = []

            async def closed_yet(stream: trio.abc.Stream) -> None:
                # A socket the node closed reads EOF (or a reset) at once.
                with trio.move_on_after(0.05):
                    try:
                        await stream.receive_some(1)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    closed.append(stream)

            async with trio.open_nursery() as nursery:
                for stream in held:
                    nursery.start_soon(closed_yet, stream)
            stats.closed_by_node += len(closed)
            still_open = [stream for stream in held if stream not in closed]
            for stream in closed:
                await stream.aclose()
            stats.extra["held_max"] = max(stats.extra.get("held_max", 0), len(still_open))
            held = still_open
    finally:
        with trio.CancelScope(shield=True):
            for stream in held:
                await stream.aclose()


async def stalled_frames(target: HostileTarget, stats: HostileStats, rng: random.Random, count: int = 60) -> None:
    """``count`` connections, each a request frame claiming just under the
    small-frame limit, all of it sent but the last 100 bytes; a connection
    the node closes (its frame deadline) is opened again."""
    claimed = NODE_LIMITS.small_frame_bytes_max - 1
    head = claimed.to_bytes(4, "big") + b"\x95" + bytes([_PROPOSE_REQUEST])
    body = b"\x00" * (claimed - 2 - 100)

    async def hold_one() -> None:
        while True:
            stream = await open_connection(target, stats)
            if stream is None:
                continue
            async with stream:
                if await send(stream, head + body, stats):
                    await read_answers(stream, stats, target.cluster_id, wait_s=float("inf"))

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(hold_one)
            await trio.sleep(0.01)


async def pipelined(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    """Proposals, 64 to a write, never reading an answer: the node must stop
    reading this connection (backpressure) and serve everyone else."""
    index = 0
    while True:
        stream = await open_connection(target, stats)
        if stream is None:
            continue
        async with stream:
            while True:
                batch = []
                for _ in range(64):
                    index += 1
                    batch.append(frame(ProposeRequest(records=(pipelined_proposal(index),)), target, correlation_id=index))
                if not await send(stream, b"".join(batch), stats, frames=len(batch)):
                    break


async def bomb_16mib(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    bomb = msgpack_bomb(16 * 1024 * 1024 - 1, target.cluster_id, in_fetch_extension=False)
    while True:
        await one_shot(target, stats, bomb)
        await trio.sleep(0.5)


async def bomb_fetch_extension(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    bomb = msgpack_bomb(NODE_LIMITS.small_frame_bytes_max - 8, target.cluster_id, in_fetch_extension=True, dst=target.node_id)
    while True:
        await one_shot(target, stats, bomb)
        await trio.sleep(0.5)


async def random_bytes(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    while True:
        await one_shot(target, stats, rng.randbytes(rng.randrange(1, 64 * 1024)), wait_s=0.5)
        await trio.sleep(0.05)


async def huge_length(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    prefixes = [
        (2**32 - 1).to_bytes(4, "big") + b"\x95\x01",
        (16 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x95\x07",
        # A FetchResponse (a large type) from an anonymous connection.
        (16 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x95\x08",
        (2**31).to_bytes(4, "big"),
    ]
    while True:
        await one_shot(target, stats, rng.choice(prefixes), wait_s=0.5)
        await trio.sleep(0.05)


async def malformed(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    while True:
        for data in malformed_frames(target, rng):
            await one_shot(target, stats, data, wait_s=0.5)
        await trio.sleep(0.1)


async def wrong_cluster(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    other = target.cluster_id + "-not"
    frames = [
        frame(DescribeQuorumRequest(), target, cluster_id=other),
        frame(ProposeRequest(records=(pipelined_proposal(0),)), target, correlation_id=2, cluster_id=other),
        frame(
            VoteRequest(src=target.other_voters()[0], dst=target.node_id, epoch=2**31 - 2, last_epoch=2**31 - 2, end_offset=10**6, pre_vote=False),
            target,
            correlation_id=3,
            cluster_id=other,
        ),
    ]
    while True:
        await one_shot(target, stats, b"".join(frames), frames=len(frames), expect=len(frames))
        await trio.sleep(0.1)


async def unknown_voter(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    """A process that says it is voter ``UNKNOWN_VOTER_ID`` (the cluster has
    no such voter), then asks for votes and fetches as that voter."""
    while True:
        epoch = await current_epoch(target)
        messages = [
            frame(Hello(node_id=UNKNOWN_VOTER_ID, role="voter"), target),
            frame(
                VoteRequest(src=UNKNOWN_VOTER_ID, dst=target.node_id, epoch=epoch + 1, last_epoch=epoch + 1, end_offset=10**6, pre_vote=False),
                target,
                correlation_id=2,
            ),
            frame(
                VoteRequest(src=UNKNOWN_VOTER_ID, dst=target.node_id, epoch=epoch + 1, last_epoch=epoch + 1, end_offset=10**6, pre_vote=True),
                target,
                correlation_id=3,
            ),
            forged_frame(_BEGIN_QUORUM_EPOCH_REQUEST, [UNKNOWN_VOTER_ID, target.node_id, epoch + 1], target.cluster_id, correlation_id=4),
        ]
        await one_shot(target, stats, b"".join(messages), frames=len(messages))
        await trio.sleep(0.2)


async def voter_impostor(target: HostileTarget, stats: HostileStats, rng: random.Random) -> None:
    """Well-formed messages only voters send, each claiming another voter
    as its sender, at the node's current epoch and the next: a Vote and a
    pre-vote, a BeginQuorumEpoch, a Fetch. Sent over a client certificate's
    connection, each must come back as a CLUSTER_AUTHORIZATION_FAILED
    ErrorFrame, read here (``authorization_refusals``)."""
    while True:
        epoch = await current_epoch(target)
        claimed = target.other_voters()[0]
        me = target.node_id
        messages = [
            frame(VoteRequest(src=claimed, dst=me, epoch=epoch + 1, last_epoch=epoch + 1, end_offset=10**6, pre_vote=False), target, 1),
            frame(VoteRequest(src=claimed, dst=me, epoch=epoch + 1, last_epoch=epoch + 1, end_offset=10**6, pre_vote=True), target, 2),
            frame(BeginQuorumEpochRequest(src=claimed, dst=me, epoch=epoch + 1), target, 3),
            frame(FetchRequest(src=claimed, dst=me, epoch=epoch, fetch_offset=0, last_fetched_epoch=0, request_id=1), target, 4),
        ]
        await one_shot(target, stats, b"".join(messages), frames=len(messages), wait_s=IMPOSTOR_ANSWER_WAIT_S, expect=len(messages))
        await trio.sleep(0.2)


ATTACKS: dict[str, Attack] = {
    "forged-epoch": forged_epoch,
    "forged-fields": forged_fields,
    "vote-flood": vote_flood,
    "connection-flood": connection_flood,
    "stalled-frames": stalled_frames,
    "pipelined": pipelined,
    "bomb-16mib": bomb_16mib,
    "bomb-fetch-extension": bomb_fetch_extension,
    "random-bytes": random_bytes,
    "huge-length": huge_length,
    "malformed": malformed,
    "wrong-cluster": wrong_cluster,
    "unknown-voter": unknown_voter,
}

#: Attacks only an attacker with a certificate runs (module docstring).
AUTHENTICATED_ATTACKS: dict[str, Attack] = {
    "voter-impostor": voter_impostor,
}

#: The campaign's hostile fault kinds, each a group of attacks run together.
HOSTILE_KINDS: dict[str, tuple[str, ...]] = {
    "garbage": ("random-bytes", "malformed", "wrong-cluster", "unknown-voter"),
    "oversize": ("huge-length", "bomb-16mib", "bomb-fetch-extension"),
    "stalled": ("stalled-frames",),
    "pipelined": ("pipelined",),
    "forged-field": ("forged-epoch", "forged-fields"),
    "flood": ("vote-flood", "connection-flood"),
}

#: What an attacker with a certificate runs on top of a kind's attacks.
AUTHENTICATED_KIND_EXTRAS: dict[str, tuple[str, ...]] = {
    "forged-field": ("voter-impostor",),
}


def attacks_of(kind: str, *, authenticated: bool) -> tuple[str, ...]:
    """The attacks hostile kind ``kind`` runs, by an attacker with a
    certificate (``authenticated``) or without. Raises ``KeyError`` for an
    unknown kind."""
    names = HOSTILE_KINDS[kind]
    return names + AUTHENTICATED_KIND_EXTRAS.get(kind, ()) if authenticated else names


async def run_attack(
    name: str, target: HostileTarget, duration_s: float, *, seed: int | None = None, min_connections: int = 0
) -> HostileStats:
    """Run attack ``name`` against ``target`` for ``duration_s`` seconds and
    return what it did; past ``duration_s``, go on until it has made
    ``min_connections`` connections (a test asserting on what each attack
    did must not depend on how fast a loaded machine connects: the caller
    bounds that wait). Raises ``KeyError`` for an unknown attack name."""
    attack = ATTACKS[name] if name in ATTACKS else AUTHENTICATED_ATTACKS[name]
    stats = HostileStats(name)
    rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(attack, target, stats, rng)
        await trio.sleep(duration_s)
        while stats.connections < min_connections:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return stats


async def run_kind(
    kind: str, target: HostileTarget, duration_s: float, *, seed: int | None = None, min_connections: int = 0
) -> list[HostileStats]:
    """Every attack of hostile fault kind ``kind`` (``attacks_of``: with
    ``target.tls``, the authenticated extras too) at once against
    ``target`` for ``duration_s`` (each past it until ``min_connections``,
    as ``run_attack``). Raises ``KeyError`` for an unknown kind."""
    names = attacks_of(kind, authenticated=target.authenticated)
    results: list[HostileStats] = []
    base = seed if seed is not None else int.from_bytes(os.urandom(8), "big")

    async def one(position: int, name: str) -> None:
        results.append(await run_attack(name, target, duration_s, seed=base + position, min_connections=min_connections))

    async with trio.open_nursery() as nursery:
        for position, name in enumerate(names):
            nursery.start_soon(one, position, name)
    results.sort(key=lambda stats: names.index(stats.attack))
    return results


__all__ = [
    "ATTACKS",
    "AUTHENTICATED_ATTACKS",
    "AUTHENTICATED_KIND_EXTRAS",
    "HOSTILE_KINDS",
    "UNKNOWN_VOTER_ID",
    "attacks_of",
    "HostileStats",
    "HostileTarget",
    "forged_epoch_vote",
    "forged_field_frames",
    "forged_frame",
    "malformed_frames",
    "msgpack_bomb",
    "run_attack",
    "run_kind",
    "vote_flood_frame",
]
