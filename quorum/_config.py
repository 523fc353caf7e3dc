"""Configuration of one quorum node.

Every duration is given in milliseconds and turned into logical ticks of
``tick_ms`` each: the core never reads a clock, it counts ``tick()`` calls.
Defaults follow Kafka's KRaft (``controller.quorum.*``), except where a
comment says why not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._voters import Voter, VoterSet, check_directory_id, check_endpoint


# The longest timer any setting may give: one hour. Every timer here guards
# something, and one set past an hour disables it in all but name: the fetch
# timeout and check quorum (KAFKA-15489) bound how long a partitioned or
# deposed leader goes unnoticed (and how stale its leader-local reads may
# be), the election timeout and backoff how long the cluster stays without a
# leader. Python's ints are unbounded, so without a bound a config file's
# ``fetch_timeout_ms = 99999999999999999999999`` would be taken as given and
# check quorum would never fire, without a word. The registration
# controller's and the brokers' timers and the connection limits' are held
# to it too.
TIMER_MS_MAX = 3_600_000
# check_quorum_factor x fetch_timeout_ms is the check-quorum window, the
# staleness bound of leader-local reads. A factor past 100 (over three
# minutes with the default 2 s fetch timeout) lets a deposed leader serve
# stale reads long after another was elected: check quorum off by another
# name. nan and inf are refused too (nan passes every comparison).
CHECK_QUORUM_FACTOR_MAX = 100.0
# What a Fetch answer's envelope (its fields, the broker's extension, the
# msgpack headers) may add to its records.
FETCH_ANSWER_ENVELOPE_BYTES = 256 * 1024
# The most record bytes one Fetch answer may carry. The answer must fit the
# largest frame the follower accepts for it (quorum.wire FRAME_BYTES_MAX,
# 16 MiB, by default): one that does not is logged and dropped, and the
# follower it is for never catches up. 14 MiB of records is an answer of
# at most 16 MiB (``fetch_answer_bytes_max``).
FETCH_BYTES_MAX_LIMIT = 14 * 1024 * 1024
# The largest snapshot chunk every node's decoder accepts (quorum.wire
# NODE_LIMITS.snapshot_chunk_bytes_max): a larger chunk would be refused by
# every follower, and no snapshot could be installed.
SNAPSHOT_CHUNK_BYTES_MAX_LIMIT = 8 * 1024 * 1024


def fetch_answer_bytes_max(fetch_bytes_max: int) -> int:
    """The largest frame a Fetch answer carrying ``fetch_bytes_max`` record
    bytes may need. ``MemoryLog.slice`` counts each record's data plus 16
    bytes; on the wire a record takes at most 18 bytes more than its data
    (an array header, a 9-byte offset, a 5-byte epoch, its kind, a 2-byte
    bin header; a longer record's 3- or 5-byte header is a smaller share
    of it), so at most 9/8 of what was counted, plus the envelope."""
    return fetch_bytes_max * 9 // 8 + FETCH_ANSWER_ENVELOPE_BYTES


def setting_value_shown(value: object) -> str:
    """``value`` for an error message: its repr, cut short (an int of
    thousands of digits has none: ``repr`` refuses it)."""
    if type(value) is int and value.bit_length() > 1000:
        return f"an int of {value.bit_length()} bits"
    return f"{value!r:.80}"


def check_int_setting(name: str, value: object, low: int, high: int, *, unit: str, low_means: str | None = None) -> None:
    """Raise ``ValueError`` naming the setting ``name``, its value and the
    range, unless ``value`` is an int (a bool is not: ``True`` is no
    timer) in ``[low, high]``. ``low_means`` says what the lower bound is
    (``"one tick"``)."""
    if type(value) is not int or not low <= value <= high:
        lowest = f"{low} {unit}" if low_means is None else f"{low_means} ({low} {unit})"
        raise ValueError(f"{name} must be an int from {lowest} to {high} {unit}, got {setting_value_shown(value)}")


def check_seconds(value: object, name: str) -> float:
    """A caller's bound in seconds as a float: a positive, finite number
    (nan made a client's every request wait forever). Raises ``TypeError``
    for anything but a number (a bool is not one), ``ValueError`` for nan,
    infinities, zero and below, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {setting_value_shown(value)}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumConfig:
    """Static configuration of one node.

    Raises ``ValueError`` on construction when a value is out of range or the
    timers cannot work together.
    """

    node_id: int
    # A static voter set (KIP-595): these ids vote, for the life of the
    # cluster. Derived from ``bootstrap_voters`` when that is given.
    voters: tuple[int, ...] = ()
    # Dynamic voters (KIP-853): the initial voter set, as ``kraft-quorum
    # format`` wrote it (ids, directory ids, endpoints); every later set is
    # a VOTERS record in the log. Empty: the static ``voters`` hold.
    bootstrap_voters: tuple[Voter, ...] = ()
    # Where voters listen, (node id, "HOST:PORT") pairs: named with the
    # leader in NOT_LEADER answers when the voter set in force names no
    # endpoint for it (a static set; KIP-853's sets carry their own). The
    # trio node fills it from its voters' addresses.
    voter_endpoints: tuple[tuple[int, str], ...] = ()
    # This node's directory id (meta.json): with dynamic voters, a node is
    # a voter only with the directory it was added with (KIP-853).
    directory_id: str | None = None
    # An observer for good (a broker; Kafka's process.roles=broker): never
    # a voter, whatever a voter set says, and every Fetch says so, so that
    # a leader holding this node id as a voter's refuses it instead of
    # counting its fetch offset as that voter's acknowledgement (KIP-631:
    # brokers and controllers share one id space; a broker given a
    # controller's id is the first mistake this guards).
    observer_only: bool = False
    tick_ms: int = 10
    # Base election timeout; each wait is drawn uniformly from [T, 2T)
    # (controller.quorum.election.timeout.ms).
    election_timeout_ms: int = 1000
    # A follower that has not completed a Fetch for this long starts an
    # election; the leader's check quorum is a multiple of it
    # (controller.quorum.fetch.timeout.ms).
    fetch_timeout_ms: int = 2000
    # Exponential election backoff: base * rand[0, 2^retries), capped.
    election_backoff_base_ms: int = 100
    election_backoff_max_ms: int = 1000
    # How long a request may go unanswered before it is sent again. Kafka's
    # default equals the fetch timeout; half of it lets one lost Fetch be
    # retried before the follower gives up on its leader.
    request_timeout_ms: int = 1000
    # Back-off after an error response, before the next request.
    retry_backoff_ms: int = 20
    # How long the leader may park a Fetch that has nothing to return.
    fetch_max_wait_ms: int = 500
    # Issue 21: a leader answers an observer's (a broker's) parked Fetch
    # when the high watermark moves, not on every append (an observer
    # applies committed records only), after the step's voter answers and
    # a bounded group a step; a read answers parked voters only. Off: every
    # parked Fetch on every append, observers again when the high
    # watermark moves, as before. Kept so that simulator seeds found before
    # replay as found (SimOptions); never a reason to turn it off.
    observers_answered_on_commit: bool = True
    fetch_bytes_max: int = 8 * 1024 * 1024
    snapshot_chunk_bytes_max: int = 1024 * 1024
    # After a snapshot, keep this many records behind it in the log so that a
    # follower slightly behind can still catch up without the snapshot.
    snapshot_retained_records: int = 1000
    # KAFKA-15489: a leader not fetched from by a majority of voters within
    # check_quorum_factor * fetch_timeout resigns. Switchable for teaching.
    check_quorum: bool = True
    check_quorum_factor: float = 1.5
    # KIP-996: a pre-vote round before a real election.
    pre_vote: bool = True
    # When the transport reports the leader unreachable (connection refused
    # or reset: the process is gone), a follower stands after one random
    # wait in [0, unreachable_leader_wait_ms) instead of the full fetch
    # timeout, and grants pre-votes again. A partition gives no such
    # signal; it is detected by the fetch timeout alone.
    fast_failover: bool = True
    # That random wait only spreads the survivors apart, so that one wins
    # the pre-vote and the vote before another stands (a split vote costs
    # an election timeout and a backoff): a few round trips suffice, not a
    # whole election timeout, and this wait was most of what a crashed
    # leader cost (docs/benchmarks.md, "Failover"). None: a quarter of
    # election_timeout_ms.
    unreachable_leader_wait_ms: int | None = None
    voter_set: frozenset[int] = field(init=False, repr=False)
    # ``ticks`` answers, by duration: the core asks for the same few
    # durations on every Fetch it serves or sends (hot path).
    _ticks_by_duration_ms: dict[float, int] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.bootstrap_voters:
            bootstrap = VoterSet(tuple(self.bootstrap_voters))
            if self.voters and tuple(sorted(self.voters)) != bootstrap.ids:
                raise ValueError(f"voters {self.voters} differ from the bootstrap voters {bootstrap.ids}")
            object.__setattr__(self, "bootstrap_voters", bootstrap.voters)
            object.__setattr__(self, "voters", bootstrap.ids)
        check_directory_id(self.directory_id)
        endpoints = tuple(self.voter_endpoints)
        for item in endpoints:
            if not isinstance(item, tuple) or len(item) != 2 or type(item[0]) is not int:
                raise ValueError(f"voter_endpoints must be (node id, HOST:PORT) pairs, got {item!r:.80}")
            check_endpoint(item[1], f"voter_endpoints[{item[0]}]")
        object.__setattr__(self, "voter_endpoints", endpoints)
        if not self.voters:
            raise ValueError("at least one voter is required")
        if len(set(self.voters)) != len(self.voters):
            raise ValueError(f"voters repeat an id: {self.voters}")
        # Ticks first: every other timer is at least one.
        check_int_setting("tick_ms", self.tick_ms, 1, TIMER_MS_MAX, unit="ms")
        for name in (
            "election_timeout_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "election_backoff_base_ms",
            "election_backoff_max_ms",
        ):
            check_int_setting(name, getattr(self, name), self.tick_ms, TIMER_MS_MAX, unit="ms", low_means="one tick")
        if self.election_backoff_base_ms > self.election_backoff_max_ms:
            # The backoff grows from the base and is capped at the max: a
            # base above the cap is a swapped pair or a typo, and every
            # backoff would silently be the cap.
            raise ValueError(
                f"election_backoff_base_ms ({self.election_backoff_base_ms} ms) must not exceed "
                f"election_backoff_max_ms ({self.election_backoff_max_ms} ms)"
            )
        check_int_setting("retry_backoff_ms", self.retry_backoff_ms, 0, TIMER_MS_MAX, unit="ms")
        if self.unreachable_leader_wait_ms is None:
            object.__setattr__(self, "unreachable_leader_wait_ms", max(self.tick_ms, self.election_timeout_ms // 4))
        elif (
            type(self.unreachable_leader_wait_ms) is not int
            or not self.tick_ms <= self.unreachable_leader_wait_ms <= self.election_timeout_ms
        ):
            raise ValueError(
                f"unreachable_leader_wait_ms must be between one tick ({self.tick_ms} ms) and "
                f"election_timeout_ms ({self.election_timeout_ms} ms), "
                f"got {setting_value_shown(self.unreachable_leader_wait_ms)}"
            )
        check_int_setting("fetch_max_wait_ms", self.fetch_max_wait_ms, 0, TIMER_MS_MAX, unit="ms")
        if self.fetch_max_wait_ms >= self.fetch_timeout_ms:
            raise ValueError("fetch_max_wait_ms must be below fetch_timeout_ms")
        factor = self.check_quorum_factor
        if (
            type(factor) not in (int, float)
            or not math.isfinite(factor)
            or not 1.0 <= factor <= CHECK_QUORUM_FACTOR_MAX
        ):
            raise ValueError(
                f"check_quorum_factor must be a finite number from 1.0 to {CHECK_QUORUM_FACTOR_MAX:g}, "
                f"got {setting_value_shown(factor)}"
            )
        object.__setattr__(self, "check_quorum_factor", float(factor))
        check_int_setting("fetch_bytes_max", self.fetch_bytes_max, 1, FETCH_BYTES_MAX_LIMIT, unit="bytes")
        check_int_setting(
            "snapshot_chunk_bytes_max", self.snapshot_chunk_bytes_max, 1, SNAPSHOT_CHUNK_BYTES_MAX_LIMIT, unit="bytes"
        )
        if type(self.snapshot_retained_records) is not int or self.snapshot_retained_records < 0:
            raise ValueError(
                f"snapshot_retained_records must be an int >= 0, got {setting_value_shown(self.snapshot_retained_records)}"
            )
        for name in ("check_quorum", "pre_vote", "fast_failover", "observers_answered_on_commit", "observer_only"):
            # A switch given as a string (TOML's "false") would be truthy.
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"{name} must be true or false, got {setting_value_shown(getattr(self, name))}")
        if self.observer_only and self.node_id in self.voters:
            raise ValueError(f"node {self.node_id} is an observer for good (a broker), yet its own voters name it")
        object.__setattr__(self, "voters", tuple(sorted(self.voters)))
        object.__setattr__(self, "voter_set", frozenset(self.voters))

    # -- derived values, in ticks -------------------------------------------------

    def ticks(self, duration_ms: float) -> int:
        """Whole ticks covering ``duration_ms`` (at least one)."""
        try:
            return self._ticks_by_duration_ms[duration_ms]
        except KeyError:
            ticks = max(1, math.ceil(duration_ms / self.tick_ms))
            if len(self._ticks_by_duration_ms) < 64:  # a handful in practice
                self._ticks_by_duration_ms[duration_ms] = ticks
            return ticks

    @property
    def dynamic_voters(self) -> bool:
        """Whether the voter set changes at run time (KIP-853)."""
        return bool(self.bootstrap_voters)

    @property
    def initial_voter_set(self) -> VoterSet:
        """The voter set before any VOTERS record: the bootstrap set, or
        the static one."""
        if self.bootstrap_voters:
            return VoterSet(self.bootstrap_voters)
        return VoterSet.of_ids(self.voters)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voter_set

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def check_quorum_ms(self) -> float:
        return self.check_quorum_factor * self.fetch_timeout_ms


# Named timer profiles (``kraft-quorum node --timers NAME``): QuorumConfig
# settings applied before any explicit flag or [quorum] setting, which win.
# docs/operations.md, "Timer profiles", says what each costs.
TIMER_PROFILES: dict[str, dict[str, int]] = {
    "default": {},
    # Quicker failover, at the price of twice the idle Fetch traffic and a
    # node that a pause of about a second (GC, swap, an overloaded machine)
    # makes stand. A crashed leader (connection reset) is replaced after a
    # wait below unreachable_leader_wait_ms; a partitioned one once its
    # followers' fetch timeout has passed. request_timeout_ms stays
    # above fetch_max_wait_ms (a parked Fetch is not a lost one) and half
    # the fetch timeout (one lost Fetch is retried before giving up).
    "fast": {
        "election_timeout_ms": 500,
        "fetch_timeout_ms": 1000,
        "fetch_max_wait_ms": 250,
        "request_timeout_ms": 500,
        "election_backoff_base_ms": 20,
        "election_backoff_max_ms": 200,
        "unreachable_leader_wait_ms": 50,
    },
}


def timer_profile(name: str) -> dict[str, int]:
    """The QuorumConfig settings of the timer profile ``name`` (a copy).
    Raises ``ValueError`` for a name not in ``TIMER_PROFILES``."""
    try:
        return dict(TIMER_PROFILES[name])
    except KeyError:
        raise ValueError(f"unknown timer profile {name!r} (known: {', '.join(TIMER_PROFILES)})") from None
