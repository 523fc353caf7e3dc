"""Configuration of one broker (a ``kraft-broker`` process or an embedded
agent)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum import NODE_ID_MAX, TIMER_MS_MAX, QuorumConfig, check_int_setting, setting_value_shown
from quorum.runtime import NodeConfig, TlsConfig
from registration import RegisterBrokerRequest

from ._lifecycle import LifecycleConfig


@dataclass(kw_only=True)
class BrokerConfig:
    """Everything a broker needs.

    ``bootstrap`` maps the id of one controller voter or more to its
    address, for the first contact only (KIP-853's
    ``controller.quorum.bootstrap.servers``): the broker fetches the
    metadata log from the leader as an observer (so its own ``broker_id``
    must not be among them), and a follower's NOT_LEADER answer names the
    leader and where it listens, which the broker's fetches and
    registrations follow. Once it has fetched the log the broker also
    follows the voter set there (KIP-853 VOTERS records, and snapshots
    that carry them): controllers added later are reached at the
    endpoints the record names, removed ones are no longer asked, so the
    list need not change with the voter set.
    ``listen`` is where clients reach it; port 0 picks a free port, and the
    bound port is what gets registered. ``data_dir`` None keeps the metadata
    log in memory (a restart fetches it again). ``quorum`` overrides the
    observer's ``QuorumConfig`` fields; give it the controllers' timeouts.

    ``staleness_bound_ms`` is the promise an Online broker keeps (design.md):
    an answer reflects every write acknowledged more than this long before
    it. It is at least ``session_timeout_ms`` (the broker answers only
    within that long of a fetch that proved its image caught up) plus the
    quorum's check-quorum window (``check_quorum_factor × fetch_timeout_ms``:
    the fetch may have gone to a deposed leader that has not resigned yet,
    KAFKA-15489); None means exactly that.

    ``tls`` (a certificate naming ``pykraft://broker/ID``) makes every
    connection mutual TLS: to the controllers (fetches, heartbeats,
    registration) and from clients (docs/security.md); without it the
    broker must say ``plaintext=True`` (plaintext is chosen, never a
    default). ``acl_file`` restricts which clients may read from this broker.

    Raises ``ValueError`` on construction for a value that cannot work.
    """

    broker_id: int
    bootstrap: dict[int, tuple[str, int]]
    listen: tuple[str, int]
    cluster_id: str = "pykraft"
    rack: str | None = None
    data_dir: Path | str | None = None
    session_timeout_ms: int = 9_000
    heartbeat_interval_ms: int = 2_000
    shutdown_timeout_ms: int = 30_000
    staleness_bound_ms: int | None = None
    # One RegisterBroker attempt gives up after this long (then retries).
    registration_timeout_ms: int = 5_000
    listener_name: str = "PLAINTEXT"
    metrics_listen: tuple[str, int] | None = None
    event_log: Path | str | None = None
    fsync: bool = True
    snapshot_every_records: int = 10_000
    # Leaving ``async with open_broker(...)`` normally does a controlled
    # shutdown first (bounded by shutdown_timeout_ms).
    controlled_shutdown_on_exit: bool = True
    quorum: dict[str, Any] = field(default_factory=dict)
    tls: TlsConfig | None = None
    plaintext: bool = False
    acl_file: Path | str | None = None

    def __post_init__(self) -> None:
        if type(self.broker_id) is not int or not 0 <= self.broker_id <= NODE_ID_MAX:
            raise ValueError(f"broker_id must be an int from 0 to {NODE_ID_MAX}, got {self.broker_id!r}")
        if not self.bootstrap:
            raise ValueError("bootstrap must name at least one controller")
        if self.broker_id in self.bootstrap:
            raise ValueError(f"broker id {self.broker_id} is a controller voter id; a broker must be an observer")
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            raise ValueError("cluster_id must be a non-empty string")
        if self.rack is not None and (not isinstance(self.rack, str) or not self.rack):
            raise ValueError("rack must be a non-empty string or None")
        # The edge where a user's timers enter (LifecycleConfig, built from
        # these, takes any positive int: the simulator gives it a session no
        # run reaches to show what self-fencing buys). Past an hour
        # (quorum.TIMER_MS_MAX) a cut-off broker never fences itself and
        # serves stale answers for as long as the cut lasts.
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "shutdown_timeout_ms", "registration_timeout_ms"):
            check_int_setting(name, getattr(self, name), 1, TIMER_MS_MAX, unit="ms")
        if self.staleness_bound_ms is not None and type(self.staleness_bound_ms) is not int:
            # A promise, not a timer: a looser one is always kept, so only
            # its type is checked (a float nan passes the comparison below).
            raise ValueError(
                f"staleness_bound_ms must be an int (ms) or None, got {setting_value_shown(self.staleness_bound_ms)}"
            )
        self.lifecycle_config()  # validates the timers
        self.node_config()  # validates the quorum overrides and addresses
        # The registration this broker will send, checked now (its rack's
        # and cluster id's bounds are the controller's): a value the
        # controller refuses is the user's to fix before the broker starts,
        # not an error when it first registers.
        RegisterBrokerRequest(
            broker_id=self.broker_id, incarnation_id="-", cluster_id=self.cluster_id,
            listeners=((self.listener_name, *self.listen),), rack=self.rack,
        )
        minimum = self.minimum_staleness_bound_ms
        if self.staleness_bound_ms is not None and self.staleness_bound_ms < minimum:
            raise ValueError(
                f"staleness_bound_ms ({self.staleness_bound_ms}) is below what this broker can keep: "
                f"session_timeout_ms + check quorum = {minimum}"
            )

    @property
    def minimum_staleness_bound_ms(self) -> int:
        quorum = self.quorum_config()
        return self.session_timeout_ms + int(quorum.check_quorum_ms)

    @property
    def effective_staleness_bound_ms(self) -> int:
        if self.staleness_bound_ms is not None:
            return self.staleness_bound_ms
        return self.minimum_staleness_bound_ms

    def lifecycle_config(self) -> LifecycleConfig:
        return LifecycleConfig(
            broker_id=self.broker_id,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            shutdown_timeout_ms=self.shutdown_timeout_ms,
        )

    def quorum_config(self) -> QuorumConfig:
        return self.node_config().quorum_config()

    def node_config(self) -> NodeConfig:
        """The observer node the broker runs."""
        return NodeConfig(
            node_id=self.broker_id,
            voters=dict(self.bootstrap),
            cluster_id=self.cluster_id,
            listen=self.listen,
            data_dir=self.data_dir,
            fsync=self.fsync,
            snapshot_every_records=self.snapshot_every_records,
            metrics_listen=self.metrics_listen,
            # A broker never votes, and says so in the Hello of each
            # connection: a node holding its id as a voter's refuses its
            # Fetches (QuorumConfig.observer_only).
            quorum={**self.quorum, "observer_only": True},
            tls=self.tls,
            plaintext=self.plaintext,
            acl_file=self.acl_file,
        )

    @property
    def bootstrap_list(self) -> list[str]:
        """``ID@HOST:PORT`` entries for the quorum clients."""
        return [f"{node_id}@{host}:{port}" for node_id, (host, port) in sorted(self.bootstrap.items())]
