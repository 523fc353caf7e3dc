"""Who talks to whom, and the shapes of network faults between them.

A ``NetworkTopology`` knows the members of a run (nodes, by ``int`` id,
with a role and an availability zone; clients, by ``str`` id, optionally in
a zone), tells the campaign runner which address each member must use to
reach each node, and turns fault *shapes* (isolate, split, bridge, one-way
cut, zone isolation, delay) into a set of **cut directed pairs**: ``(src,
dst)`` cut means nothing ``src`` sends reaches ``dst``. The backend
(``ProxyNetwork``, ``NetnsNetwork``) turns that set into proxy link modes or
firewall rules; the shapes themselves are backend-independent.

Faults stack: each call adds one ``NetFault`` to ``active_faults()``;
``heal()`` removes them all (or ``heal(fault)`` just one). Every operation
returns a ``NetFault`` whose ``as_history_value()`` is ready for a nemesis
event in the history.

All methods are synchronous (a partition is a handful of local commands);
from trio call them through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import itertools
import random
import secrets
import string
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ._errors import NemesisError, UnknownMemberError

NodeId = int
ClientId = str
MemberId = int | str
Role = Literal["controller", "broker"]
CutKind = Literal["drop", "refuse"]
ROLES: tuple[str, ...] = ("controller", "broker")
CUT_KINDS: tuple[str, ...] = ("drop", "refuse")
RUN_ID_CHARACTERS = string.ascii_lowercase + string.digits
RUN_ID_LENGTH_MAX = 6  # "pk-" + 6 + "-" + "b123" fits Linux's 15-character interface names


def new_run_id() -> str:
    """A fresh random run id (6 lowercase hex digits)."""
    return secrets.token_hex(3)


def run_prefix(run_id: str) -> str:
    """The prefix of everything a run creates: ``pk-<run_id>-``.

    Raises ``ValueError`` unless ``run_id`` is 1 to 6 characters of
    ``[a-z0-9]``."""
    if not (1 <= len(run_id) <= RUN_ID_LENGTH_MAX) or any(ch not in RUN_ID_CHARACTERS for ch in run_id):
        raise ValueError(f"run id must be 1 to {RUN_ID_LENGTH_MAX} characters of [a-z0-9], got {run_id!r}")
    return f"pk-{run_id}-"


@dataclass(frozen=True, slots=True)
class Member:
    """A node or a client of the run; ``index`` is its order of addition."""

    member_id: MemberId
    kind: Literal["node", "client"]
    role: str | None
    zone: str | None
    index: int
    observer: bool = False

    @property
    def is_node(self) -> bool:
        return self.kind == "node"

    @property
    def label(self) -> str:
        """``n<id>`` for a node, ``c<id>`` for a client: unique, and safe in
        link names."""
        return f"n{self.member_id}" if self.is_node else f"c{self.member_id}"


@dataclass(frozen=True, slots=True)
class NetFault:
    """One network fault operation, as done.

    ``cut`` lists the directed pairs it cuts (``(src, dst)``: nothing from
    src reaches dst); ``delays`` lists ``(src, dst, delay_ms, jitter_ms)``.
    ``params`` holds the shape's arguments, JSON-ready."""

    fault_id: int
    shape: str
    params: dict[str, Any]
    how: str | None = None
    cut: tuple[tuple[MemberId, MemberId], ...] = ()
    delays: tuple[tuple[MemberId, MemberId, float, float], ...] = ()
    backend: str = ""

    def as_history_value(self) -> dict[str, Any]:
        """A JSON-ready description for the history's nemesis event."""
        value: dict[str, Any] = {"fault_id": self.fault_id, "shape": self.shape, "backend": self.backend, **self.params}
        if self.how is not None:
            value["how"] = self.how
        if self.cut:
            value["cut"] = [[src, dst] for src, dst in self.cut]
        if self.delays:
            value["delays"] = [[src, dst, delay_ms, jitter_ms] for src, dst, delay_ms, jitter_ms in self.delays]
        return value

    def describe(self) -> str:
        """One line for logs."""
        params = ", ".join(f"{key}={value}" for key, value in self.params.items())
        how = f" ({self.how})" if self.how else ""
        return f"#{self.fault_id} {self.shape}({params}){how}: {len(self.cut)} directed pairs cut"


Group = MemberId | Iterable[MemberId]


def _as_list(group: Group) -> list[MemberId]:
    if isinstance(group, (int, str)):
        return [group]
    return list(group)


def _sort_key(member_id: MemberId) -> tuple[int, int, str]:
    # nodes (int) before clients (str), each in natural order
    return (0, member_id, "") if isinstance(member_id, int) else (1, 0, member_id)


class NetworkTopology(abc.ABC):
    """Members, addresses and fault shapes; a backend subclass applies the
    cut set. Use it as a context manager: ``__exit__`` removes everything
    the backend created."""

    backend_name: ClassVar[str] = "abstract"

    def __init__(self, run_id: str | None = None) -> None:
        """Raises ``ValueError`` for a malformed ``run_id``."""
        self.run_id = run_id or new_run_id()
        self.prefix = run_prefix(self.run_id)
        self._members: dict[MemberId, Member] = {}
        self._faults: list[NetFault] = []
        self._fault_ids = itertools.count(1)
        self._member_indexes = itertools.count(0)
        # Nemesis operations may come from several threads (trio.to_thread):
        # each one reads and replaces the fault list as a whole.
        self._lock = threading.RLock()

    # -- membership -----------------------------------------------------------------------

    def add_node(self, node_id: NodeId, role: Role = "controller", zone: str | None = None) -> None:
        """Add a node (a controller or a broker) in ``zone``.

        Raises ``ValueError`` for a non-int id, an id already added or an
        unknown role; backend errors when its address cannot be set up."""
        if isinstance(node_id, bool) or not isinstance(node_id, int):
            raise ValueError(f"node ids are ints, got {node_id!r}")
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self._add(Member(node_id, "node", role, zone, index=-1))

    def add_client(self, client_id: ClientId, zone: str | None = None, *, observer: bool = False) -> None:
        """Add a client (a process or task of the harness that talks to
        nodes) in ``zone`` (None: no zone). An ``observer`` is a client no
        fault ever cuts or delays: the harness's own eyes (finding the
        leader to isolate, final reads), which must see every node even
        while a zone is isolated; naming one in a fault is an error.

        Raises ``ValueError`` for a non-str id or an id already added."""
        if not isinstance(client_id, str) or not client_id:
            raise ValueError(f"client ids are non-empty strings, got {client_id!r}")
        self._add(Member(client_id, "client", None, zone, index=-1, observer=observer))

    def _add(self, member: Member) -> None:
        with self._lock:
            if member.member_id in self._members:
                raise ValueError(f"{member.kind} {member.member_id!r} was already added")
            # Never reused, even when a backend failed half way through a
            # member: its half-made namespace must not block the next one.
            member = dataclasses.replace(member, index=next(self._member_indexes))
            self._register_member(member)
            self._members[member.member_id] = member

    def member(self, member_id: MemberId) -> Member:
        """Raises ``UnknownMemberError`` for an id never added."""
        try:
            return self._members[member_id]
        except KeyError:
            raise UnknownMemberError(f"no node or client {member_id!r} in this topology") from None

    def nodes(self, role: str | None = None, zone: str | None = None) -> list[NodeId]:
        """Node ids, sorted, optionally only those of one role / zone."""
        return sorted(
            m.member_id  # type: ignore[misc]
            for m in self._members.values()
            if m.is_node and (role is None or m.role == role) and (zone is None or m.zone == zone)
        )

    def clients(self, zone: str | None = None) -> list[ClientId]:
        """Client ids (observers excluded), sorted, optionally only those
        of one zone."""
        return sorted(
            m.member_id  # type: ignore[misc]
            for m in self._members.values()
            if not m.is_node and not m.observer and (zone is None or m.zone == zone)
        )

    def observers(self) -> list[ClientId]:
        """Observer client ids, sorted."""
        return sorted(m.member_id for m in self._members.values() if m.observer)  # type: ignore[misc]

    def zones(self) -> list[str]:
        return sorted({m.zone for m in self._members.values() if m.zone is not None})

    def has_path(self, src: MemberId, dst: MemberId) -> bool:
        """Whether traffic can flow from ``src`` to ``dst`` at all: between
        two nodes, or between a node and a client (clients do not talk to
        each other)."""
        a, b = self.member(src), self.member(dst)
        return src != dst and (a.is_node or b.is_node)

    # -- addresses --------------------------------------------------------------------------

    @abc.abstractmethod
    def listen_address(self, node_id: NodeId) -> tuple[str, int]:
        """The address node ``node_id`` must listen on (``--listen``).

        Raises ``UnknownMemberError``, or ``ValueError`` for a client."""

    @abc.abstractmethod
    def address_for(self, src: MemberId, dst: NodeId) -> tuple[str, int]:
        """The address ``src`` must use to reach node ``dst``.

        Raises ``UnknownMemberError``, or ``ValueError`` when ``dst`` is
        not a node."""

    def voters_arg(self, src: NodeId, voter_ids: Iterable[NodeId] | None = None) -> str:
        """``--voters`` for node ``src``: ``ID@HOST:PORT,...`` with each
        voter at the address ``src`` must use (its own at its listen
        address). Default voters: every controller.

        Raises ``UnknownMemberError`` for an id never added."""
        voters = self.nodes(role="controller") if voter_ids is None else sorted(voter_ids)
        entries = []
        for voter in voters:
            host, port = self.listen_address(voter) if voter == src else self.address_for(src, voter)
            entries.append(f"{voter}@{host}:{port}")
        return ",".join(entries)

    def bootstrap_for(self, client_id: ClientId, node_ids: Iterable[NodeId] | None = None) -> list[str]:
        """``ID@HOST:PORT`` entries for a client's bootstrap list (default:
        every node). Raises ``UnknownMemberError`` for an id never added."""
        targets = self.nodes() if node_ids is None else sorted(node_ids)
        return [f"{node}@{host}:{port}" for node in targets for host, port in [self.address_for(client_id, node)]]

    def run_in(self, member_id: MemberId, argv: Sequence[str]) -> list[str]:
        """The argv that starts a process as ``member_id`` on the network
        (unchanged here; netns mode prefixes ``ip netns exec``).

        Raises ``UnknownMemberError`` for an id never added."""
        self.member(member_id)
        return list(argv)

    def client_sockets(self, member_id: MemberId) -> contextlib.AbstractContextManager[None]:
        """A context manager under which the current trio task (and the
        tasks it starts) open their sockets as ``member_id`` (nothing to do
        here; netns mode opens them in the member's namespace).

        Raises ``UnknownMemberError`` for an id never added."""
        self.member(member_id)
        return contextlib.nullcontext()

    # -- fault shapes ------------------------------------------------------------------------

    def isolate(self, node_id: NodeId, *, clients: bool = False, how: CutKind = "drop") -> NetFault:
        """Cut ``node_id`` from every other node, both ways; with
        ``clients``, from every client too. By default clients still reach
        it: an isolated leader that clients can still read from is the
        KAFKA-15489 zombie.

        Raises ``UnknownMemberError``, ``ValueError`` for a bad ``how``."""
        node = self._node(node_id)
        others = [m for m in self._faultable_ids() if m != node.member_id and (clients or self.member(m).is_node)]
        cut = self._both_ways([node_id], others)
        return self._record("isolate", {"node": node_id, "clients": clients}, how, cut)

    def split(self, side_a: Group, side_b: Group, *, how: CutKind = "drop") -> NetFault:
        """Cut every member of ``side_a`` from every member of ``side_b``,
        both ways. Members on neither side are untouched.

        Raises ``UnknownMemberError``, ``ValueError`` when a member is on
        both sides or ``how`` is bad."""
        a, b = self._ids(side_a), self._ids(side_b)
        self._disjoint(a, b)
        cut = self._both_ways(a, b)
        return self._record("split", {"side_a": a, "side_b": b}, how, cut)

    def split_random_halves(self, rng: random.Random, *, clients: bool = False, how: CutKind = "drop") -> NetFault:
        """Jepsen's random halves: the controllers shuffled with ``rng`` and
        cut into a minority and a majority; each broker (and, with
        ``clients``, each client) drawn to one side. Deterministic for a
        given ``rng`` state.

        Raises ``ValueError`` with fewer than two controllers."""
        controllers = self.nodes(role="controller")
        if len(controllers) < 2:
            raise ValueError("random halves need at least two controllers")
        rng.shuffle(controllers)
        minority_size = len(controllers) // 2
        minority, majority = controllers[:minority_size], controllers[minority_size:]
        extras = self.nodes(role="broker") + (self.clients() if clients else [])
        for member_id in extras:
            (minority if rng.random() < 0.5 else majority).append(member_id)
        a, b = self._ids(minority), self._ids(majority)
        cut = self._both_ways(a, b)
        return self._record("random-halves", {"minority": a, "majority": b}, how, cut)

    def bridge(self, side_a: Group, middle: Group, side_b: Group, *, how: CutKind = "drop") -> NetFault:
        """Jepsen's bridge: ``side_a`` and ``side_b`` cut from each other,
        both ways, while ``middle`` still sees both (the node that can
        carry a majority for either side).

        Raises ``UnknownMemberError``, ``ValueError`` when the groups
        overlap or ``how`` is bad."""
        a, m, b = self._ids(side_a), self._ids(middle), self._ids(side_b)
        self._disjoint(a, b)
        self._disjoint(a, m)
        self._disjoint(m, b)
        cut = self._both_ways(a, b)
        return self._record("bridge", {"side_a": a, "middle": m, "side_b": b}, how, cut)

    def bridge_random(self, rng: random.Random, *, how: CutKind = "drop") -> NetFault:
        """A bridge drawn with ``rng``: one controller in the middle, the
        other controllers halved, each broker drawn to a side.

        Raises ``ValueError`` with fewer than three controllers."""
        controllers = self.nodes(role="controller")
        if len(controllers) < 3:
            raise ValueError("a bridge needs at least three controllers")
        rng.shuffle(controllers)
        middle, rest = controllers[:1], controllers[1:]
        half = len(rest) // 2
        side_a, side_b = rest[:half], rest[half:]
        for broker in self.nodes(role="broker"):
            (side_a if rng.random() < 0.5 else side_b).append(broker)
        return self.bridge(side_a, middle, side_b, how=how)

    def cut_one_way(self, src: Group, dst: Group) -> NetFault:
        """Nothing any member of ``src`` sends reaches any member of
        ``dst``; the other way still flows (as far as the backend can: see
        docs/nemesis.md on TCP under iptables).

        Raises ``UnknownMemberError``, ``ValueError`` when the groups
        overlap."""
        sources, destinations = self._ids(src), self._ids(dst)
        self._disjoint(sources, destinations)
        cut = [(s, d) for s in sources for d in destinations if self.has_path(s, d)]
        return self._record("cut-one-way", {"src": sources, "dst": destinations}, "drop", cut)

    def isolate_from(self, node_id: NodeId, group: Group, *, how: CutKind = "drop") -> NetFault:
        """Cut ``node_id`` from every member of ``group``, both ways, and
        from nothing else: e.g. a broker cut from the controllers but not
        from its clients (seed 003 case 2).

        Raises ``UnknownMemberError``, ``ValueError`` when ``group``
        contains ``node_id`` or ``how`` is bad."""
        node = self._node(node_id)
        others = self._ids(group)
        self._disjoint([node.member_id], others)
        cut = self._both_ways([node_id], others)
        return self._record("isolate-from", {"node": node_id, "group": others}, how, cut)

    def isolate_zone(self, zone: str, *, clients: bool = True, how: CutKind = "drop") -> NetFault:
        """Cut every node in ``zone`` from every node outside it, both ways
        (seed 003 cases 3 and 4: a controller and a broker together). With
        ``clients``, the zone's clients go with it: they reach only their
        zone, and clients outside reach only nodes outside. Without, every
        client still reaches every node.

        Raises ``ValueError`` for a zone no member is in."""
        if zone not in self.zones():
            raise ValueError(f"no member is in zone {zone!r}; zones: {self.zones()}")
        members = [m for m in self._faultable_ids() if clients or self.member(m).is_node]
        inside = [m for m in members if self.member(m).zone == zone]
        outside = [m for m in members if self.member(m).zone != zone]
        cut = self._both_ways(inside, outside)
        return self._record("isolate-zone", {"zone": zone, "inside": inside, "clients": clients}, how, cut)

    def set_delay(self, src: Group, dst: Group, delay_ms: float, jitter_ms: float = 0.0) -> NetFault:
        """Delay everything each member of ``src`` sends to each member of
        ``dst`` by ``delay_ms`` + uniform[0, ``jitter_ms``] (directed: call
        again with the groups swapped for both ways). A later delay on the
        same pair replaces an earlier one; ``heal`` removes it.

        Raises ``UnsupportedFaultError`` when the backend cannot delay,
        ``ValueError`` for negative values, ``UnknownMemberError``."""
        if delay_ms < 0 or jitter_ms < 0:
            raise ValueError(f"delay_ms and jitter_ms must be >= 0, got {delay_ms}, {jitter_ms}")
        self._check_delay_supported()
        sources, destinations = self._ids(src), self._ids(dst)
        delays = tuple(
            (s, d, float(delay_ms), float(jitter_ms)) for s in sources for d in destinations if self.has_path(s, d)
        )
        params = {"src": sources, "dst": destinations, "delay_ms": delay_ms, "jitter_ms": jitter_ms}
        fault = NetFault(next(self._fault_ids), "delay", params, None, (), delays, self.backend_name)
        return self._push(fault)

    def heal(self, fault: NetFault | None = None) -> NetFault:
        """Remove every active fault (partitions and delays), or only
        ``fault``. Returns the heal as done.

        Raises ``ValueError`` when ``fault`` is not active."""
        with self._lock:
            if fault is None:
                removed = list(self._faults)
                remaining: list[NetFault] = []
            else:
                if fault not in self._faults:
                    raise ValueError(f"fault #{fault.fault_id} is not active")
                removed = [fault]
                remaining = [f for f in self._faults if f is not fault]
            healed = NetFault(
                next(self._fault_ids), "heal", {"healed": [f.fault_id for f in removed]}, None, (), (), self.backend_name
            )
            self._replace_faults(remaining)
            return healed

    def active_faults(self) -> list[NetFault]:
        """The faults in force now, oldest first."""
        return list(self._faults)

    def cut_pairs(self) -> dict[tuple[MemberId, MemberId], CutKind]:
        """Every directed pair cut now, and how (``refuse`` wins over
        ``drop`` when faults overlap)."""
        cut: dict[tuple[MemberId, MemberId], CutKind] = {}
        for fault in self._faults:
            for pair in fault.cut:
                if cut.get(pair) != "refuse":
                    cut[pair] = fault.how  # type: ignore[assignment]
        return cut

    def delay_pairs(self) -> dict[tuple[MemberId, MemberId], tuple[float, float]]:
        """Every delayed directed pair now: ``(delay_ms, jitter_ms)``; the
        newest delay on a pair wins."""
        delays: dict[tuple[MemberId, MemberId], tuple[float, float]] = {}
        for fault in self._faults:
            for src, dst, delay_ms, jitter_ms in fault.delays:
                delays[(src, dst)] = (delay_ms, jitter_ms)
        return {pair: value for pair, value in delays.items() if value != (0.0, 0.0)}

    # -- lifecycle ----------------------------------------------------------------------------

    @abc.abstractmethod
    def close(self) -> None:
        """Remove everything the backend created. Idempotent."""

    def __enter__(self) -> NetworkTopology:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- backend hooks ---------------------------------------------------------------------

    @abc.abstractmethod
    def _register_member(self, member: Member) -> None:
        """Give a new member its addresses (links, namespace); called
        before it is visible in ``self._members``."""

    @abc.abstractmethod
    def _apply(
        self,
        cut: dict[tuple[MemberId, MemberId], CutKind],
        delays: dict[tuple[MemberId, MemberId], tuple[float, float]],
    ) -> None:
        """Make the network match ``cut`` and ``delays`` exactly."""

    def _check_delay_supported(self) -> None:  # noqa: B027 - a hook: by default every delay is supported
        """Raises ``UnsupportedFaultError`` when the backend cannot delay."""

    # -- helpers ---------------------------------------------------------------------------

    def _sorted_ids(self) -> list[MemberId]:
        return sorted(self._members, key=_sort_key)

    def _faultable_ids(self) -> list[MemberId]:
        return [m for m in self._sorted_ids() if not self._members[m].observer]

    def _ids(self, group: Group) -> list[MemberId]:
        ids = _as_list(group)
        for member_id in ids:
            if self.member(member_id).observer:
                raise ValueError(f"{member_id!r} is an observer: no fault may cut or delay it")
        if len(set(ids)) != len(ids):
            raise ValueError(f"a member is listed twice in {ids}")
        return sorted(ids, key=_sort_key)

    def _node(self, node_id: NodeId) -> Member:
        member = self.member(node_id)
        if not member.is_node:
            raise ValueError(f"{node_id!r} is a client, not a node")
        return member

    @staticmethod
    def _disjoint(a: Sequence[MemberId], b: Sequence[MemberId]) -> None:
        common = set(a) & set(b)
        if common:
            raise ValueError(f"{sorted(common, key=_sort_key)} cannot be on both sides")

    def _both_ways(self, a: Sequence[MemberId], b: Sequence[MemberId]) -> list[tuple[MemberId, MemberId]]:
        pairs = []
        for x in a:
            for y in b:
                if self.has_path(x, y):
                    pairs.append((x, y))
                    pairs.append((y, x))
        return pairs

    def _record(self, shape: str, params: dict[str, Any], how: str, cut: list[tuple[MemberId, MemberId]]) -> NetFault:
        if how not in CUT_KINDS:
            raise ValueError(f"how must be one of {CUT_KINDS}, got {how!r}")
        ordered = tuple(sorted(set(cut), key=lambda pair: (_sort_key(pair[0]), _sort_key(pair[1]))))
        return self._push(NetFault(next(self._fault_ids), shape, params, how, ordered, (), self.backend_name))

    def _push(self, fault: NetFault) -> NetFault:
        with self._lock:
            self._replace_faults([*self._faults, fault])
        return fault

    def _replace_faults(self, faults: list[NetFault]) -> None:
        """Apply the new fault set; on failure, put the old one back (as
        far as the backend lets us) and raise."""
        previous = self._faults
        self._faults = faults
        try:
            self._apply(self.cut_pairs(), self.delay_pairs())
        except BaseException:
            self._faults = previous
            with contextlib.suppress(NemesisError, OSError):
                self._apply(self.cut_pairs(), self.delay_pairs())
            raise

    def members(self) -> Iterator[Member]:
        """Every member, nodes first, each in id order."""
        for member_id in self._sorted_ids():
            yield self._members[member_id]
