"""The voter set: who votes, who counts toward a majority (KIP-853).

A cluster's voters are either *static* (``QuorumConfig.voters``, fixed for
the life of the cluster, as before KIP-853) or *dynamic*: the initial set
comes from ``QuorumConfig.bootstrap_voters`` (written once by ``kraft-quorum
format``) and every later set is a ``VOTERS`` control record in the log.

A voter is a node id *and* a directory id: the random id ``format`` wrote
into that node's data directory (``meta.json``). A node whose disk was
wiped comes back with a new directory id and is not the voter it used to be
(its votes and acknowledgements were lost with the disk), so it is an
observer until it is added again (KIP-853, "directory id").

A dynamic cluster's snapshots carry the voter set that holds at their end
(``join_snapshot``): a follower that installs a snapshot learns the set with
it, since the records that made it are no longer in anyone's log.

Removed disks. A voter set also remembers the disks (node id, directory id)
an operator removed and has not added back (``VoterSet.removed``, the most
recent ``REMOVED_VOTERS_MAX``), so that the leader refuses to let auto-join
add one of them again (``QuorumNode.add_voter``) and a node learns from any
set it holds that its disk was removed (``quorum.AutoJoin``). It lives in
the voter set because the voter set is the state that every VOTERS record
and every snapshot carries whole: a snapshot that swallowed both the record
adding a disk and the one removing it still says "removed" (issue 17).
KIP-853 has no such memory: its auto-join re-adds a removed controller.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._quorum_math import majority
from ._types import NODE_ID_MAX

# Directory ids are short strings of letters, digits, '-' and '_' (format
# writes 32 hex digits; Kafka's are base64url): they sit inside the
# ``ID@HOST:PORT:DIRECTORY`` lists operators type. The bound keeps a hostile
# peer or a damaged record from carrying more.
DIRECTORY_ID_CHARS_MAX = 64
_DIRECTORY_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# An endpoint is "host:port"; a voter has a handful at most.
ENDPOINT_CHARS_MAX = 255
ENDPOINTS_MAX = 8
# Voter sets stay small: every change is one voter (Raft thesis §4.1), and
# every majority is counted over the whole set on every acknowledgement.
VOTERS_MAX = 255
# Removed disks a voter set remembers, the most recent first out when full.
# The mark is needed only until the removed disk's node hears of it: once
# it fetches a record or a snapshot whose set names it removed, or the
# leader refuses its auto-join AddVoter with VOTER_REMOVED, the node
# remembers it on its own disk for good (``quorum.AutoJoin``). So a mark is
# lost only if 64 other disks are removed while that node stays away, and
# even then only an operator's wish is at stake, not Raft safety: the
# leader still adds only a caught-up replica, one change at a time (§4.1).
# Each mark costs ~45 bytes in every VOTERS record and snapshot header, so
# a full list is ~3 KB, far below every frame limit.
REMOVED_VOTERS_MAX = 64
# VOTERS record versions: 1 holds the voters; 2 also the removed disks.
# A set with no removed disk is written in version 1, byte for byte what
# pykraft wrote before version 2, so a cluster that never removed a voter
# keeps records an older node reads as it always did. An older node reads
# a version-2 record too (its decoder looks at "voters" only): in a
# rolling upgrade it holds the right voters, and while it leads it does
# not refuse a removed disk (it does not know auto-join's AddVoter
# version 2 either, so no new node's auto-join reaches it).
VOTERS_RECORD_VERSION = 2

# A dynamic cluster's snapshot: this magic, then the length of the voter
# set's encoding (4 bytes, big-endian), the encoding, then the state
# machine's own bytes.
_SNAPSHOT_MAGIC = b"KVS1"


def check_directory_id(directory_id: object, name: str = "directory_id") -> str | None:
    """``directory_id`` if it is None or 1..``DIRECTORY_ID_CHARS_MAX``
    letters, digits, '-' and '_'; raises ``ValueError`` otherwise."""
    if directory_id is None:
        return None
    if (
        not isinstance(directory_id, str)
        or not 0 < len(directory_id) <= DIRECTORY_ID_CHARS_MAX
        or not set(directory_id) <= _DIRECTORY_ID_CHARS
    ):
        raise ValueError(
            f"{name} must be 1..{DIRECTORY_ID_CHARS_MAX} letters, digits, '-' or '_', got {directory_id!r}"
        )
    return directory_id


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter: a node id, the directory id of the disk it votes with
    (None: not known, as in a static voter list, which then matches any),
    and the endpoints ("host:port") it listens on. Raises ``ValueError``
    for a value out of range."""

    node_id: int
    directory_id: str | None = None
    endpoints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.node_id) is not int or not 0 <= self.node_id <= NODE_ID_MAX:
            raise ValueError(f"voter node id must be in 0..{NODE_ID_MAX}, got {self.node_id!r}")
        check_directory_id(self.directory_id)
        if not isinstance(self.endpoints, tuple) or len(self.endpoints) > ENDPOINTS_MAX:
            raise ValueError(f"voter {self.node_id}: at most {ENDPOINTS_MAX} endpoints in a tuple")
        for endpoint in self.endpoints:
            if not isinstance(endpoint, str) or not 0 < len(endpoint) <= ENDPOINT_CHARS_MAX or not endpoint.isprintable():
                raise ValueError(f"voter {self.node_id}: endpoint {endpoint!r} is not a printable host:port")

    def describe(self) -> str:
        """``id`` or ``id/directory`` (the first 8 characters), for logs."""
        return str(self.node_id) if self.directory_id is None else f"{self.node_id}/{self.directory_id[:8]}"


@dataclass(frozen=True, slots=True)
class VoterSet:
    """A set of voters, sorted by node id, each id once, and ``removed``:
    the disks ``(node_id, directory_id)`` an operator removed and has not
    added back, oldest first, at most ``REMOVED_VOTERS_MAX`` (see the
    module docstring). Raises ``ValueError`` when empty, too large, when
    an id repeats, or for a removed disk that is malformed, repeated or a
    voter of the set."""

    voters: tuple[Voter, ...]
    removed: tuple[tuple[int, str], ...] = ()
    # Looked up on every Fetch and Vote: a dict, not a scan.
    _by_id: dict[int, Voter] = field(init=False, repr=False, compare=False)
    # ``ids`` and ``majority``, computed once: the leader needs both on
    # every commit.
    _ids: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _majority: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        voters = tuple(sorted(self.voters, key=lambda voter: voter.node_id))
        if not voters:
            raise ValueError("a voter set needs at least one voter")
        if len(voters) > VOTERS_MAX:
            raise ValueError(f"a voter set holds at most {VOTERS_MAX} voters, not {len(voters)}")
        ids = tuple(voter.node_id for voter in voters)
        if len(set(ids)) != len(ids):
            raise ValueError(f"voter ids repeat: {ids}")
        removed = tuple(self.removed)
        if len(removed) > REMOVED_VOTERS_MAX:
            raise ValueError(f"a voter set remembers at most {REMOVED_VOTERS_MAX} removed disks, not {len(removed)}")
        for disk in removed:
            if not isinstance(disk, tuple) or len(disk) != 2 or disk[1] is None:
                raise ValueError(f"a removed disk is (node id, directory id), got {disk!r}")
            Voter(disk[0], disk[1])  # raises ValueError for an id out of range
        if len(set(removed)) != len(removed):
            raise ValueError(f"removed disks repeat: {removed}")
        by_disk = {(voter.node_id, voter.directory_id) for voter in voters}
        if by_disk.intersection(removed):
            raise ValueError(f"a voter is also a removed disk: {sorted(by_disk.intersection(removed))}")
        object.__setattr__(self, "voters", voters)
        object.__setattr__(self, "removed", removed)
        object.__setattr__(self, "_by_id", {voter.node_id: voter for voter in voters})
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_majority", majority(len(voters)))

    @classmethod
    def of_ids(cls, node_ids: Iterable[int]) -> VoterSet:
        """A static voter set: these ids, directory ids unknown."""
        return cls(tuple(Voter(node_id) for node_id in node_ids))

    @property
    def ids(self) -> tuple[int, ...]:
        """The voters' node ids, ascending."""
        return self._ids

    @property
    def majority(self) -> int:
        """More than half of the voters (Raft thesis §3.4)."""
        return self._majority

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def __len__(self) -> int:
        return len(self.voters)

    def get(self, node_id: int) -> Voter | None:
        """The voter with ``node_id``, or None."""
        return self._by_id.get(node_id)

    def holds(self, node_id: int, directory_id: str | None) -> bool:
        """Is (``node_id``, ``directory_id``) a voter here? A voter whose
        directory id is not known matches any directory; a known one
        matches only itself (KIP-853: a wiped disk is another replica)."""
        voter = self._by_id.get(node_id)
        return voter is not None and (voter.directory_id is None or voter.directory_id == directory_id)

    def was_removed(self, node_id: int, directory_id: str | None) -> bool:
        """Did an operator remove the disk (``node_id``, ``directory_id``)
        and not add it back (within the last ``REMOVED_VOTERS_MAX``)?"""
        return directory_id is not None and (node_id, directory_id) in self.removed

    def with_voter(self, voter: Voter) -> VoterSet:
        """This set plus ``voter``, which is no longer a removed disk (an
        operator may add back a disk on purpose; auto-join may not, and the
        leader checks that before, ``QuorumNode.add_voter``). Raises
        ``ValueError`` if its id is here."""
        if voter.node_id in self:
            raise ValueError(f"node {voter.node_id} is already a voter")
        removed = tuple(disk for disk in self.removed if disk != (voter.node_id, voter.directory_id))
        return VoterSet(self.voters + (voter,), removed)

    def without(self, node_id: int) -> VoterSet:
        """This set less ``node_id``, whose disk (when its directory id is
        known) joins the removed ones, the oldest dropped past
        ``REMOVED_VOTERS_MAX``; raises ``ValueError`` if it is not here or
        is the last voter."""
        voter = self.get(node_id)
        if voter is None:
            raise ValueError(f"node {node_id} is not a voter")
        removed = self.removed
        if voter.directory_id is not None:
            disk = (node_id, voter.directory_id)
            removed = (*(other for other in removed if other != disk), disk)[-REMOVED_VOTERS_MAX:]
        return VoterSet(tuple(other for other in self.voters if other.node_id != node_id), removed)

    def describe(self) -> str:
        """``{1, 2/ab12cd34, 3}``, for logs and events."""
        return "{" + ", ".join(voter.describe() for voter in self.voters) + "}"

    # -- the VOTERS control record -------------------------------------------

    def encode(self) -> bytes:
        """The payload of a ``VOTERS`` record (and of a snapshot's voter
        set header): deterministic JSON, in version 1 (``{"voters":
        rows}``) when no disk is removed, else version 2 (``{"removed":
        [[id, directory], ...], "version": 2, "voters": rows}``; see
        ``VOTERS_RECORD_VERSION``)."""
        rows = [[voter.node_id, voter.directory_id, list(voter.endpoints)] for voter in self.voters]
        document: dict[str, object] = {"voters": rows}
        if self.removed:
            document["version"] = VOTERS_RECORD_VERSION
            document["removed"] = [list(disk) for disk in self.removed]
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> VoterSet:
        """Read a ``VOTERS`` record's payload, of either version. Raises
        ``ValueError`` for anything ``encode`` would not have written (a
        version-2 document with no removed disk among them: one set has one
        encoding, so replicas compare records byte for byte)."""
        try:
            document = json.loads(bytes(data).decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"voter set record is not JSON: {error}") from None
        except RecursionError:  # a record from the log: never a crash
            raise ValueError("voter set record is not JSON: nested too deeply") from None
        rows = document.get("voters") if isinstance(document, dict) else None
        if not isinstance(rows, list) or len(rows) > VOTERS_MAX:
            raise ValueError("voter set record has no list of voters")
        voters = []
        for row in rows:
            if not isinstance(row, list) or len(row) != 3 or not isinstance(row[2], list):
                raise ValueError(f"voter set record has a malformed voter {row!r}")
            voters.append(Voter(row[0], row[1], tuple(row[2])))
        assert isinstance(document, dict)
        version = document.get("version", 1)
        if version == 1:
            if "version" in document or "removed" in document:
                raise ValueError("a version-1 voter set record names its version or removed disks")
            return cls(tuple(voters))
        if version != VOTERS_RECORD_VERSION:
            raise ValueError(f"voter set record has unknown version {version!r}")
        listed = document.get("removed")
        if not isinstance(listed, list) or not 0 < len(listed) <= REMOVED_VOTERS_MAX:
            raise ValueError(f"a version-2 voter set record lists 1..{REMOVED_VOTERS_MAX} removed disks")
        removed = []
        for disk in listed:
            if not isinstance(disk, list) or len(disk) != 2 or not isinstance(disk[1], str):
                raise ValueError(f"voter set record has a malformed removed disk {disk!r}")
            removed.append((disk[0], check_directory_id(disk[1], "removed directory_id")))
        return cls(tuple(voters), tuple(removed))  # type: ignore[arg-type]


PORT_MAX = 65535


def listen_address(text: str, name: str = "address") -> tuple[str, int]:
    """``HOST:PORT`` to listen on (``[::1]:0`` for IPv6; port 0: any free
    port) as ``(host, port)``. Raises ``ValueError`` naming ``name`` and
    ``text``: what a user types is checked where it is read, not where the
    socket fails to open."""
    host, _, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not (port.isascii() and port.isdigit()) or int(port) > PORT_MAX:
        raise ValueError(f"bad {name} {text!r}: expected HOST:PORT with a port from 0 to {PORT_MAX}")
    return host, int(port)


def endpoint_address(endpoint: str) -> tuple[str, int]:
    """A voter's ``HOST:PORT`` endpoint (``[::1]:9093`` for IPv6) as
    ``(host, port)``. Raises ``ValueError`` for anything else."""
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def check_endpoint(endpoint: object, name: str = "endpoint") -> str:
    """``endpoint`` if it is a printable ``HOST:PORT`` of at most
    ``ENDPOINT_CHARS_MAX`` characters that ``endpoint_address`` parses;
    raises ``ValueError`` otherwise. For endpoints from outside (a peer's
    NOT_LEADER answer names where its leader listens: untrusted input)."""
    if not isinstance(endpoint, str) or not 0 < len(endpoint) <= ENDPOINT_CHARS_MAX or not endpoint.isprintable():
        raise ValueError(f"{name} must be a printable HOST:PORT of at most {ENDPOINT_CHARS_MAX} characters")
    try:
        endpoint_address(endpoint)
    except ValueError:
        raise ValueError(f"{name} must be HOST:PORT, got {endpoint[:60]!r}") from None
    return endpoint


def voter_set_problem(data: bytes) -> str | None:
    """Why ``data`` is not a valid ``VOTERS`` payload, or None."""
    try:
        VoterSet.decode(data)
    except ValueError as error:
        return str(error)
    return None


def join_snapshot(voters: VoterSet, state_data: bytes) -> bytes:
    """A dynamic cluster's snapshot bytes: the voter set that holds at the
    snapshot's end, then the state machine's snapshot."""
    encoded = voters.encode()
    return _SNAPSHOT_MAGIC + len(encoded).to_bytes(4, "big") + encoded + state_data


def split_snapshot(data: bytes) -> tuple[VoterSet, bytes]:
    """The inverse of ``join_snapshot``. Raises ``ValueError`` for bytes it
    did not write (a static cluster's snapshot, or damage)."""
    head = len(_SNAPSHOT_MAGIC)
    if bytes(data[:head]) != _SNAPSHOT_MAGIC or len(data) < head + 4:
        raise ValueError("not a dynamic-voter snapshot (no voter set header)")
    length = int.from_bytes(data[head : head + 4], "big")
    if len(data) < head + 4 + length:
        raise ValueError("snapshot voter set header is cut short")
    voters = VoterSet.decode(bytes(data[head + 4 : head + 4 + length]))
    return voters, bytes(data[head + 4 + length :])


def snapshot_holds_voters(data: bytes) -> bool:
    """Does ``data`` start with a voter set (``join_snapshot``)? A cluster
    upgraded from static voters (``QuorumNode.upgrade_voters``) has
    snapshots of both kinds: those taken before its first VOTERS record
    hold the state machine's bytes alone. Told apart by the header, which
    must decode as a voter set: a state machine's own bytes that began
    with the magic, a length and a valid voter set are not a practical
    risk."""
    try:
        split_snapshot(data)
    except ValueError:
        return False
    return True


def snapshot_header_problem(data: bytes) -> str | None:
    """Why ``data`` begins a voter set header that does not decode (damage),
    or None: for a snapshot with a whole header, and for one without any (a
    snapshot taken while the voters were static)."""
    if bytes(data[: len(_SNAPSHOT_MAGIC)]) != _SNAPSHOT_MAGIC:
        return None
    try:
        split_snapshot(data)
    except ValueError as error:
        return str(error)
    return None


def state_machine_data(snapshot_data: bytes) -> bytes:
    """The state machine's part of a snapshot: what follows the voter set
    when it carries one (taken while the voters were dynamic,
    ``snapshot_holds_voters``), all of it otherwise (taken while they were
    static, before a cluster's upgrade, even if this node was formatted
    with dynamic voters)."""
    if snapshot_holds_voters(snapshot_data):
        return split_snapshot(snapshot_data)[1]
    return snapshot_data
