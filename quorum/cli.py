"""``kraft-quorum``: run a quorum node, inspect a quorum, decode a log.

    kraft-quorum node --node-id 1 --voters 1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093 --data-dir data/1 \
        --tls-ca certs/ca.pem --tls-cert certs/node-1.pem --tls-key certs/node-1-key.pem   # or --plaintext
    kraft-quorum describe --bootstrap 127.0.0.1:9091 --status
    kraft-quorum add-voter --bootstrap 1@127.0.0.1:9091 --node-id 4 --directory-id ID --endpoint 127.0.0.1:9094
    kraft-quorum remove-voter --bootstrap 1@127.0.0.1:9091 --node-id 3 --directory-id ID
    kraft-quorum write --bootstrap 1@127.0.0.1:9091 KEY VALUE
    kraft-quorum read --bootstrap 1@127.0.0.1:9091 KEY
    kraft-quorum dump-log data/1
    kraft-quorum check-storage data/1
    kraft-quorum certs --dir certs --nodes 1,2,3 --brokers 7 --clients admin

With certificates (``--tls-ca/--tls-cert/--tls-key``, docs/security.md)
every connection is mutual TLS 1.3. A node runs plaintext only when told
so (``--plaintext``) and says so in one log line; given neither, it
refuses to start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click
import trio

from .cli_errors import LOG_LEVELS, CommandError, ReportingGroup, load_toml, record_listen_addresses
from .cli_tls import client_tls, listener_tls, tls_client_options
from ._config import TIMER_PROFILES, timer_profile
from .runtime import EXPIRY_WARNING_DAYS, ConnectionLimits, KeyValueStateMachine, NodeConfig, open_quorum_node, parse_voters
from ._voters import Voter, endpoint_address, listen_address
from .wire import NODE_ID_MAX, check_cluster_id
from .storage import (
    EXIT_NOT_A_DATA_DIR,
    StorageOwnershipError,
    check_storage_report,
    dump_log,
    dump_log_command,
    format_data_dir,
    new_directory_id,
)


@click.group(cls=ReportingGroup)
def main() -> None:
    """Run and inspect a pykraft metadata quorum."""


def node_options(command: Any) -> Any:
    """The options every node process takes (kraft-quorum node, kraft-controller)."""
    for option in reversed(_NODE_OPTIONS):
        command = option(command)
    return command


_NODE_OPTIONS = [
    click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), help="A TOML file of these options."),
    click.option("--node-id", type=int),
    click.option(
        "--voters",
        help="ID@HOST:PORT,... for every voter (Kafka's controller.quorum.voters); not needed with a --data-dir "
        "formatted with --initial-voters or --standalone (its meta.json names them).",
    ),
    click.option("--listen", help="HOST:PORT to listen on (default: this node's voter address)."),
    click.option("--data-dir", type=click.Path(file_okay=False), help="Where the log lives (default: in memory)."),
    click.option(
        "--cluster-id",
        default=None,
        help="Refuse peers of other clusters.  [default: the one `format` wrote into --data-dir, else pykraft]",
    ),
    click.option("--metrics", "metrics_listen", help="HOST:PORT for Prometheus /metrics, /health and /ready."),
    click.option(
        "--metrics-enabled/--no-metrics-enabled", default=None, help="Keep metrics (default on; off only to measure their cost)."
    ),
    click.option(
        "--event-log",
        type=click.Path(dir_okay=False),
        help="Append role changes (on a controller, also broker registrations and state changes) here as JSON lines.",
    ),
    click.option(
        "--on-damage",
        type=click.Choice(["repair", "refuse"]),
        default=None,
        help="A damaged log: repair it from a leader, not voting until then (default), or refuse to start.",
    ),
    click.option("--fsync/--no-fsync", default=None, help="fsync before acknowledging (default on; off only for experiments)."),
    click.option(
        "--timers",
        type=click.Choice(sorted(TIMER_PROFILES)),
        default=None,
        help="A named set of quorum timers (docs/operations.md, \"Timer profiles\"); the flags below override it.  [default: default]",
    ),
    click.option("--election-timeout-ms", type=int),
    click.option("--fetch-timeout-ms", type=int),
    click.option("--check-quorum/--no-check-quorum", default=None, help="KAFKA-15489 leader progress timeout."),
    click.option("--pre-vote/--no-pre-vote", default=None, help="KIP-996 pre-vote."),
    click.option("--snapshot-every-records", type=int),
    # What peers and clients may cost (docs/operations.md, "Hostile peers and clients").
    click.option("--connections-max", type=int, help="Open inbound connections on the listener."),
    click.option("--connections-per-address-max", type=int, help="Open inbound connections from one source address."),
    click.option("--frame-deadline-ms", type=int, help="Time to finish a started frame."),
    click.option("--idle-timeout-ms", type=int, help="Close an inbound connection silent this long (voters excepted)."),
    click.option("--requests-in-flight-max", type=int, help="Client requests per connection before it is not read."),
    click.option(
        "--request-bytes-in-flight-max", type=int, help="Bytes of client requests per connection before it is not read."
    ),
    click.option("--write-backlog-bytes-max", type=int, help="Unwritten answers per connection before it is not read."),
    click.option("--frame-bytes-max", type=int, help="Largest FetchResponse or FetchSnapshotResponse frame."),
    click.option("--small-frame-bytes-max", type=int, help="Largest frame of any other message type."),
    # Mutual TLS (docs/security.md): all three, or --plaintext.
    click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), help="CA bundle (PEM) peers and clients are checked against."),
    click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="This node's certificate (PEM; SAN pykraft://node/ID)."),
    click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="This node's private key (PEM)."),
    click.option("--acl-file", type=click.Path(exists=True, dir_okay=False), help="Who may administer and read (reloaded on SIGHUP)."),
    click.option(
        "--plaintext", is_flag=True, default=None, help="Run without TLS (teaching, quick starts): this or the --tls-* files."
    ),
    click.option(
        "--auto-join/--no-auto-join",
        default=None,
        help="With a --data-dir formatted for dynamic voters: once caught up, add this disk as a voter "
        "(KIP-853 auto-join); never again once it has been one (an operator removed it).",
    ),
    click.option("--log-level", type=LOG_LEVELS, default="INFO", show_default=True),
]

# Settings that fill ``ConnectionLimits``.
_CONNECTION_LIMIT_KEYS = frozenset(field.name for field in dataclasses.fields(ConnectionLimits))


def node_settings(config_file: str | None, log_level: str, options: dict[str, Any]) -> dict[str, Any]:
    """Logging set up, and the settings of a TOML file overridden by flags."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    settings: dict[str, Any] = {}
    if config_file:
        settings.update(load_toml(config_file, "--config"))
    settings.update({key: value for key, value in options.items() if value is not None})
    return settings


def node_config_or_usage_error(settings: dict[str, Any]) -> NodeConfig:
    try:
        config = _node_config(settings)
        # Timers that cannot work together are a usage error now, not a
        # failure once the node starts.
        config.quorum_config()
        return config
    except (KeyError, ValueError, TypeError) as error:
        raise click.UsageError(str(error)) from error


@main.command("node")
@node_options
def node_command(config_file: str | None, log_level: str, **options: Any) -> None:
    """Run one voter (or observer) until SIGTERM or SIGINT; a leader hands
    over with EndQuorumEpoch before it exits."""
    config = node_config_or_usage_error(node_settings(config_file, log_level, options))
    trio.run(serve_until_signalled, config, lambda config: open_quorum_node(config, KeyValueStateMachine()))


# Keys a node's TOML file (or its flags) may set; anything else is a typo
# that would otherwise be ignored without a word.
_SETTINGS_KEYS = frozenset(
    {
        "node_id", "voters", "cluster_id", "listen", "data_dir", "fsync", "metrics_listen", "metrics_enabled", "event_log",
        "snapshot_every_records", "retention_bytes", "retention_ms", "quorum",
        "timers", "election_timeout_ms", "fetch_timeout_ms", "check_quorum", "pre_vote", "on_damage",
        "tls_ca", "tls_cert", "tls_key", "acl_file", "plaintext", "auto_join",
    }
    | _CONNECTION_LIMIT_KEYS
)  # fmt: skip


# Settings a TOML file gives in the wrong shape are refused by name, not
# met later as an AttributeError ("a bug in pykraft") or a message that
# names no setting. Values are checked further where they are used.
_SETTING_SHAPES = (
    ("voters", (str, dict), 'a string "ID@HOST:PORT,..." or a table of ID = "HOST:PORT"'),
    ("quorum", dict, "a table"),
    ("timers", str, "the name of a timer profile"),
    ("on_damage", str, "a string"),
    *((key, str, "a string") for key in ("cluster_id", "data_dir", "event_log", "acl_file", "tls_ca", "tls_cert", "tls_key")),
    *((key, str, 'a string "HOST:PORT"') for key in ("listen", "metrics_listen")),
)


def _node_config(settings: dict[str, Any]) -> NodeConfig:
    unknown = sorted(set(settings) - _SETTINGS_KEYS)
    if unknown:
        raise ValueError(f"unknown settings: {', '.join(unknown)} (known: {', '.join(sorted(_SETTINGS_KEYS))})")
    if "node_id" not in settings:
        raise ValueError("--node-id is required (or give it in --config)")
    if "voters" not in settings and "data_dir" not in settings:
        raise ValueError(
            "--voters is required (or give it in --config), unless --data-dir was formatted with "
            "kraft-quorum format --initial-voters or --standalone"
        )
    for key, kinds, shape in _SETTING_SHAPES:
        if key in settings and not isinstance(settings[key], kinds):
            raise ValueError(f"{key} must be {shape}, got {settings[key]!r}"[:300])
    voters = settings.get("voters", {})
    # The profile first; then the flags (or top-level keys), then [quorum].
    quorum: dict[str, Any] = timer_profile(settings.get("timers", "default"))
    quorum.update(
        {
            key: settings[key]
            for key in ("election_timeout_ms", "fetch_timeout_ms", "check_quorum", "pre_vote")
            if key in settings
        }
    )
    quorum.update(settings.get("quorum", {}))
    tls = listener_tls(settings, config_file=True)
    return NodeConfig(
        node_id=settings["node_id"],  # NodeConfig checks it: int() made true and 1.9 node 1
        voters=parse_voters(voters) if isinstance(voters, str) else {int(k): listen_address(v, f'voter {k} address') for k, v in voters.items()},
        cluster_id=settings.get("cluster_id"),
        listen=listen_address(settings["listen"], "listen address") if "listen" in settings else None,
        data_dir=settings.get("data_dir"),
        fsync=settings.get("fsync", True),
        metrics_listen=listen_address(settings["metrics_listen"], "metrics address") if "metrics_listen" in settings else None,
        metrics_enabled=settings.get("metrics_enabled", True),
        event_log=settings.get("event_log"),
        snapshot_every_records=settings.get("snapshot_every_records", 10_000),
        **{key: settings[key] for key in ("retention_bytes", "retention_ms") if key in settings},
        quorum=quorum,
        connection_limits=ConnectionLimits(**{key: settings[key] for key in _CONNECTION_LIMIT_KEYS if key in settings}),
        on_damage=settings.get("on_damage", "repair"),
        tls=tls,
        plaintext=tls is None,
        acl_file=settings.get("acl_file"),
        auto_join=bool(settings.get("auto_join", False)),
    )


async def serve_until_signalled(config: NodeConfig, open_node: Any) -> None:
    """Run the node ``open_node(config)`` opens until SIGTERM or SIGINT.

    What fails (a refused data directory, an address in use) propagates;
    the command's ``ReportingGroup`` prints it as one or two lines."""
    log = logging.getLogger("pykraft.node")
    record_listen_addresses({"--listen": config.listen, "--metrics": config.metrics_listen})
    if config.data_dir is None:
        log.warning(
            "node %d has no --data-dir: its log and votes live in memory and a restart forgets them "
            "(for tests only; give --data-dir to keep them)",
            config.node_id,
        )
    from .client import refuse_a_fresh_static_disk_in_a_dynamic_cluster

    await refuse_a_fresh_static_disk_in_a_dynamic_cluster(config)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with open_node(config) as node, trio.open_nursery() as nursery:
            log.info("node %d serving on port %s", node.node_id, node.listen_port)
            if config.auto_join:
                nursery.start_soon(auto_join, node, config)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    reload_on_sighup(node, log)
                    continue
                log.info("node %d got %s: shutting down", node.node_id, signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
    log.info("node %d stopped", config.node_id)


#: Written into the data directory the first time this disk is a voter:
#: from then on auto-join never adds it again (an operator who removes it
#: means it; Kafka 4.2's auto-join re-added such a voter).
AUTO_JOIN_MARKER = "auto-join-was-voter.json"


async def auto_join(node: Any, config: NodeConfig) -> None:
    """KIP-853 auto-join, as ``quorum.AutoJoin`` decides it: add this disk as
    a voter once it is caught up, remember (``AUTO_JOIN_MARKER``, fsynced)
    that it was one, and never add it again. Asks the leader every fetch
    timeout while the action is JOIN; a refusal is logged and asked again
    later."""
    from . import AutoJoin, AutoJoinAction, ErrorCode
    from .client import QuorumClient, QuorumClientError, VoterChangeRefusedError
    from .storage import atomic_write_json

    log = logging.getLogger("pykraft.node")
    core, marker = node.runtime.node, Path(config.data_dir) / AUTO_JOIN_MARKER
    decision = AutoJoin(config.node_id, core.config.directory_id, was_voter=marker.exists())
    said = None
    interval_s = core.config.fetch_timeout_ms / 1000
    endpoint = f"{config.listen[0]}:{config.listen[1]}"

    def remember_being_a_voter() -> None:
        atomic_write_json(marker, {"directory_id": core.config.directory_id}, fsync=config.fsync)

    def observe() -> None:
        # In the core task, on every change of the voter set: durable before
        # any later record (a removal) is handled, however quick.
        if decision.observe(core):
            remember_being_a_voter()

    node.runtime.watch_voter_set(observe)
    messages = {
        AutoJoinAction.VOTER: "is a voter with directory %s: auto-join will not add it again once removed",
        AutoJoinAction.REMOVED: "directory %s was a voter and was removed: auto-join does not add it again",
        AutoJoinAction.ID_TAKEN: "the voter set holds this node id with another directory: remove-voter it to let %s join",
    }
    while True:
        # Also here: a record adding this disk and one removing it may come
        # in one fetch, leaving the set in force as it was (no watcher call).
        observe()
        action = decision.action(core)
        if action != said and action in messages:
            log.info("node %d: " + messages[action], config.node_id, core.config.directory_id)
        said = action
        if action is AutoJoinAction.JOIN:
            leader = core.leader_id
            known = core.voters.get(leader)
            address = known.endpoints[0] if known is not None and known.endpoints else "%s:%d" % config.voters[leader]
            try:
                async with QuorumClient(
                    [f"{leader}@{address}"], cluster_id=config.cluster_id, tls=config.tls, retry_timeout_s=interval_s
                ) as client:
                    offset = await client.add_voter(
                        config.node_id, core.config.directory_id, [endpoint], auto_join=True
                    )
            except VoterChangeRefusedError as refused:
                # VOTER_REMOVED: an operator removed this disk (the leader's
                # voter set says so, though this node may never have
                # fetched a set holding it): never asked again.
                if decision.answered(refused.code):
                    remember_being_a_voter()
                    log.info("node %d: auto-join: not added, and never asked again: %s", config.node_id, refused)
                else:
                    log.info("node %d: auto-join: not added yet: %s", config.node_id, refused)
            except QuorumClientError as error:
                log.info("node %d: auto-join: not added yet: %s", config.node_id, error)
            else:
                # Committed: this disk was a voter, whether or not this node
                # fetched the record before a removal (and a snapshot) came.
                if decision.answered(ErrorCode.NONE):
                    remember_being_a_voter()
                log.info("node %d: auto-join: added as a voter at offset %d", config.node_id, offset)
        await trio.sleep(interval_s)


def reload_on_sighup(node: Any, log: logging.Logger) -> None:
    """SIGHUP: read the certificate, key, CA bundle and ACL file again; a
    file that cannot be used is logged and what was in force stays."""
    from .runtime import TlsError

    try:
        node.reload_security()
    except (TlsError, ValueError, OSError) as error:
        log.error("node %d: SIGHUP: not reloaded, the previous certificate and ACL stay in force: %s", node.node_id, error)
    else:
        log.info("node %d: SIGHUP: certificate, CA bundle and ACL reloaded", node.node_id)


def _client(bootstrap: str, cluster_id: str, timeout_s: float, tls: Any = None) -> Any:
    from .client import QuorumClient

    return QuorumClient(bootstrap.split(","), cluster_id=cluster_id, retry_timeout_s=timeout_s, tls=tls)


def checked_bootstrap(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    """``--bootstrap``, refused as a usage error when an entry is not a
    server (the clients would raise deep inside, reported as a bug)."""
    from .client import parse_bootstrap

    try:
        parse_bootstrap(value.split(","))
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return value


_bootstrap_option = click.option(
    "--bootstrap", required=True, callback=checked_bootstrap, help="HOST:PORT[,...] or ID@HOST:PORT[,...]"
)
_cluster_option = click.option("--cluster-id", default="pykraft", show_default=True)
def _not_nan(_context: click.Context, _parameter: click.Parameter, seconds: float) -> float:
    # FloatRange lets "nan" through: no comparison with it is true.
    if seconds != seconds:
        raise click.BadParameter("must be a number of seconds, got nan")
    return seconds


timeout_option = click.option(
    "--timeout-s",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    callback=_not_nan,
    help="Give up when no node has served the request within this long.",
)


async def _describe(bootstrap: list[str], cluster_id: str, timeout_s: float, tls: Any = None) -> Any:
    async with _client(",".join(bootstrap), cluster_id, timeout_s, tls) as client:
        answer = await client.describe()
        _server_expiry[:] = [client.server_certificate_not_after]
        return answer


# The expiry of the certificate of the server that answered the last
# describe (shown by ``describe``).
_server_expiry: list[Any] = []


def _answered_by_leader(answer: Any) -> bool:
    # Only a leader reports its own last fetch time (its clock); any other
    # node leaves every progress field but its own log end empty
    # (QuorumNode.describe).
    return any(replica.node_id == answer.leader_id and replica.last_fetch_ms is not None for replica in answer.voters)


async def _describe_at_leader(bootstrap: list[str], cluster_id: str, timeout_s: float, tls: Any = None) -> Any:
    """DescribeQuorum answered by the leader, the one node that knows
    replication progress: the first node that answers names the leader, and
    if it is not the leader itself the bootstrap entries are asked in turn,
    the leader's own ``ID@HOST:PORT`` first, within ``timeout_s`` in all.
    Raises ``CommandError`` when none of them is the leader, and what
    ``QuorumClient.describe`` raises when no node answers at all."""
    from .client import QuorumClientError

    deadline = trio.current_time() + timeout_s
    first = await _describe(bootstrap, cluster_id, timeout_s, tls)
    if _answered_by_leader(first):
        return first
    if first.leader_id is None:
        raise CommandError(
            f"no leader is known in epoch {first.epoch}, and only a leader knows replication progress.",
            hint="Try again once an election is over (describe --status shows the leader).",
        )
    own_entry_first = sorted(bootstrap, key=lambda entry: not entry.strip().startswith(f"{first.leader_id}@"))
    for entry in own_entry_first:
        remaining_s = deadline - trio.current_time()
        if remaining_s <= 0:
            break
        try:
            answer = await _describe([entry], cluster_id, remaining_s, tls)
        except QuorumClientError:
            continue
        if _answered_by_leader(answer):
            return answer
    raise CommandError(
        f"node {first.leader_id} leads epoch {first.epoch} but no --bootstrap entry answered as the leader, and only "
        f"the leader knows replication progress.",
        hint=f"Ask the leader: give its address, --bootstrap {first.leader_id}@HOST:PORT.",
    )


@main.command("describe")
@_bootstrap_option
@_cluster_option
@timeout_option
@click.option("--status", "view", flag_value="status", default=True, help="Leader, epoch, high watermark.")
@click.option(
    "--replication", "view", flag_value="replication", help="Each replica's log end offset and lag (asked of the leader)."
)
@click.option("--json", "as_json", is_flag=True)
@tls_client_options
def describe_command(bootstrap: str, cluster_id: str, timeout_s: float, view: str, as_json: bool, **tls_options: Any) -> None:
    """DescribeQuorum, like kafka-metadata-quorum describe. With TLS, also
    when the answering node's certificate and this client's expire."""
    tls = client_tls(**tls_options)
    if view == "replication":
        answer = trio.run(_describe_at_leader, bootstrap.split(","), cluster_id, timeout_s, tls)
    else:
        answer = trio.run(_describe, bootstrap.split(","), cluster_id, timeout_s, tls)
    expiry = _certificate_expiry(tls)
    replicas = [("voter", r) for r in answer.voters] + [("observer", r) for r in answer.observers]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "leader_id": answer.leader_id,
                    "epoch": answer.epoch,
                    "high_watermark": answer.high_watermark,
                    "answered_by": answer.node_id,
                    "disk_failure": answer.disk_failure,
                    "repairing": answer.repairing,
                    "repairing_voters": None if answer.repairing_voters is None else list(answer.repairing_voters),
                    "replicas": [
                        {
                            "kind": kind,
                            "node_id": r.node_id,
                            "log_end_offset": r.log_end_offset,
                            "last_fetch_ms": r.last_fetch_ms,
                            "directory_id": r.directory_id,
                        }
                        for kind, r in replicas
                    ],
                    **({"certificates": expiry} if expiry else {}),
                }
            )
        )
        return
    if view == "status":
        click.echo(f"LeaderId:      {answer.leader_id}")
        click.echo(f"LeaderEpoch:   {answer.epoch}")
        click.echo(f"HighWatermark: {answer.high_watermark}")
        click.echo(f"CurrentVoters: {[r.node_id for r in answer.voters]}")
        click.echo(f"CurrentObservers: {[r.node_id for r in answer.observers]}")
        for line in _storage_lines(answer):
            click.echo(line)
        for item in expiry:
            warning = "   WARNING: renew it" if item["days_left"] < EXPIRY_WARNING_DAYS else ""
            click.echo(f"CertificateExpiry: {item['whose']} {item['not_after']} ({item['days_left']:.1f} days){warning}")
        return
    # A voter's directory id (KIP-853) exists only in a cluster with
    # dynamic voters: the column a static cluster would fill with dashes is
    # left out (its replicas fetch with directory ids all the same).
    directories = any(replica.directory_id is not None for kind, replica in replicas if kind == "voter")
    directory_header = f" {'DirectoryId':<32}" if directories else ""
    click.echo(f"{'NodeId':>8} {'LogEndOffset':>14} {'Lag':>8} {'LastFetchMs':>12}{directory_header}  Status")
    for kind, replica in replicas:
        lag = "-" if replica.log_end_offset is None else max(0, answer.high_watermark - replica.log_end_offset)
        status = "Leader" if replica.node_id == answer.leader_id else kind.capitalize()
        last = "-" if replica.last_fetch_ms is None else replica.last_fetch_ms
        end = "-" if replica.log_end_offset is None else replica.log_end_offset
        directory = f" {replica.directory_id or '-':<32}" if directories else ""
        click.echo(f"{replica.node_id:>8} {end:>14} {lag:>8} {last:>12}{directory}  {status}")
    for line in _storage_lines(answer):
        click.echo(line)


def _storage_lines(answer: Any) -> list[str]:
    """The answering node's own storage conditions (DescribeQuorum version
    2): its id, a failing disk (docs/storage.md, "Disk errors") and a log
    repair under way ("Repair"). An older node answers version 1, which
    carries neither."""
    if answer.version < 2:
        return ["AnsweredBy:    unknown (the node answered DescribeQuorum version 1: no disk or repair status)"]
    disk = f"FAILED ({answer.disk_failure}): acknowledging nothing until a write succeeds" if answer.disk_failure else "ok"
    repair = "yes: repairing a damaged log from the leader; not voting until done" if answer.repairing else "no"
    lines = [f"AnsweredBy:    {answer.node_id}", f"Disk:          {disk}", f"Repairing:     {repair}"]
    # Version 3: the voters the answering leader knows to be repairing.
    if answer.version >= 3 and answer.node_id == answer.leader_id:
        repairing = list(answer.repairing_voters or ())
        lines.append(f"VotersRepairing: {repairing if repairing else 'none'}")
    return lines


def _certificate_expiry(tls: Any) -> list[dict[str, Any]]:
    """When the answering server's certificate and this client's expire
    (nothing without TLS)."""
    import datetime

    if tls is None:
        return []
    now = datetime.datetime.now(datetime.timezone.utc)
    found = [("server", _server_expiry[0] if _server_expiry else None), (f"client {tls.principal}", tls.not_after)]
    return [
        {"whose": whose, "not_after": not_after.isoformat(), "days_left": (not_after - now).total_seconds() / 86400}
        for whose, not_after in found
        if not_after is not None
    ]


@main.command("write")
@_bootstrap_option
@_cluster_option
@timeout_option
@click.argument("key")
@click.argument("value")
@tls_client_options
def write_command(bootstrap: str, cluster_id: str, timeout_s: float, key: str, value: str, **tls_options: Any) -> None:
    """Commit KEY=VALUE to the node's key-value state machine (with TLS, a
    raw write: the client's principal needs ``admin`` in the ACL)."""
    tls = client_tls(**tls_options)

    async def run() -> int:
        async with _client(bootstrap, cluster_id, timeout_s, tls) as client:
            return await client.propose([KeyValueStateMachine.encode_put(key.encode(), value.encode())])

    offset = trio.run(run)
    click.echo(f"committed at offset {offset}")


@main.command("read")
@_bootstrap_option
@_cluster_option
@timeout_option
@click.option("--mode", type=click.Choice(["linearizable", "leader-local"]), default="linearizable", show_default=True)
@click.argument("key")
@tls_client_options
def read_command(bootstrap: str, cluster_id: str, timeout_s: float, mode: str, key: str, **tls_options: Any) -> None:
    """Read KEY from the leader's state machine."""
    tls = client_tls(**tls_options)

    async def run() -> tuple[int, bytes | None]:
        async with _client(bootstrap, cluster_id, timeout_s, tls) as client:
            return await client.read(key.encode(), mode=mode)

    offset, value = trio.run(run)
    found, version = KeyValueStateMachine.decode_answer(value) if value is not None else (None, -1)
    shown = "(none)" if found is None else found.decode(errors="replace")
    click.echo(f"{key} = {shown}   (version {version}, read at offset {offset}, {mode})")


@main.command("add-voter")
@_bootstrap_option
@_cluster_option
@timeout_option
@click.option("--node-id", required=True, type=click.IntRange(0, NODE_ID_MAX), help="The replica to make a voter.")
@click.option(
    "--directory-id",
    required=True,
    help="Its data directory's id (format printed it; describe --replication shows it for an observer).",
)
@click.option("--endpoint", "endpoints", required=True, multiple=True, help="HOST:PORT it listens on (repeatable).")
@tls_client_options
def add_voter_command(
    bootstrap: str, cluster_id: str, timeout_s: float, node_id: int, directory_id: str, endpoints: tuple[str, ...],
    **tls_options: Any,
) -> None:  # fmt: skip
    """Make a caught-up observer a voter (KIP-853 AddRaftVoter; with TLS
    the client's principal needs ``admin``). The leader refuses a replica
    that has not fetched lately or lags behind the high watermark, and any
    change while another is not yet committed (retried until --timeout-s)."""
    try:
        for endpoint in endpoints:
            endpoint_address(endpoint)
        Voter(node_id, directory_id, tuple(endpoints))
    except ValueError as error:
        raise click.UsageError(f"bad voter: {error}") from error
    tls = client_tls(**tls_options)

    async def run() -> int:
        async with _client(bootstrap, cluster_id, timeout_s, tls) as client:
            return await client.add_voter(node_id, directory_id, list(endpoints))

    offset = trio.run(run)
    click.echo(f"voter {node_id} (directory {directory_id}) added: the change committed at offset {offset}")


@main.command("remove-voter")
@_bootstrap_option
@_cluster_option
@timeout_option
@click.option("--node-id", required=True, type=click.IntRange(0, NODE_ID_MAX), help="The voter to remove.")
@click.option(
    "--directory-id",
    help="Remove it only if this is its directory id (the disk being replaced; describe --replication shows it).",
)
@tls_client_options
def remove_voter_command(
    bootstrap: str, cluster_id: str, timeout_s: float, node_id: int, directory_id: str | None, **tls_options: Any
) -> None:
    """Remove a voter (KIP-853 RemoveRaftVoter; with TLS the client's
    principal needs ``admin``). A leader that removes itself hands over
    once the change is committed."""
    try:
        Voter(node_id, directory_id)
    except ValueError as error:
        raise click.UsageError(f"bad voter: {error}") from error
    tls = client_tls(**tls_options)

    async def run() -> int:
        async with _client(bootstrap, cluster_id, timeout_s, tls) as client:
            return await client.remove_voter(node_id, directory_id)

    offset = trio.run(run)
    shown = "" if directory_id is None else f" (directory {directory_id})"
    click.echo(f"voter {node_id}{shown} removed: the change committed at offset {offset}")


@main.command("upgrade-voters")
@_bootstrap_option
@_cluster_option
@timeout_option
@tls_client_options
def upgrade_voters_command(bootstrap: str, cluster_id: str, timeout_s: float, **tls_options: Any) -> None:
    """Upgrade a cluster started with a static --voters list to dynamic
    voters, without downtime (KIP-853's kraft.version 0 to 1; with TLS the
    client's principal needs ``admin``). The leader writes the first voter
    set record: the static voters, each with the directory id it fetches
    with and the endpoint the leader's --voters list gives it. From then on
    add-voter and remove-voter work, and every node follows the record, not
    its --voters list. Safe to run again: it says when there is nothing to
    do."""
    tls = client_tls(**tls_options)

    async def run() -> int | None:
        async with _client(bootstrap, cluster_id, timeout_s, tls) as client:
            return await client.upgrade_voters()

    offset = trio.run(run)
    if offset is None:
        click.echo("the voters are dynamic already: nothing to do")
    else:
        click.echo(f"voters upgraded to dynamic: the voter set committed at offset {offset}")


@main.command(
    "dump-log",
    params=list(dump_log_command.params),
    help=f"{dump_log_command.help}\n\nExit status {EXIT_NOT_A_DATA_DIR} if DIRECTORY holds no log.",
)
def dump_log_cli(directory: Path, **options: Any) -> None:
    # A folder with nothing to decode is a mistyped path, not an empty log:
    # say so, rather than print an all-zero summary and exit 0.
    if next(iter(dump_log(directory, records=False)))["type"] == "summary":
        raise CommandError(
            f"{directory} holds no log: no segments, snapshots, meta.json or quorum-state.json.",
            hint="Give a node's --data-dir (or a folder of its .log files).",
            exit_code=EXIT_NOT_A_DATA_DIR,
        )
    dump_log_command.callback(directory=directory, **options)  # type: ignore[misc]


def parse_initial_voters(text: str) -> tuple[Voter, ...]:
    """``ID@HOST:PORT:DIRECTORY,...`` (Kafka's ``--initial-controllers``)
    as voters. Raises ``ValueError`` with the item at fault."""
    voters: list[Voter] = []
    for item in text.split(","):
        item = item.strip()
        try:
            node, rest = item.split("@", 1)
            endpoint, directory = rest.rsplit(":", 1)
            endpoint_address(endpoint)
            voters.append(Voter(int(node), directory, (endpoint,)))
        except ValueError as error:
            raise ValueError(f"initial voter {item!r} is not ID@HOST:PORT:DIRECTORY ({error})") from None
    return tuple(voters)


@main.command("format")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--node-id", required=True, type=click.IntRange(0, NODE_ID_MAX))
@click.option("--cluster-id", required=True)
@click.option(
    "--initial-voters",
    help="ID@HOST:PORT:DIRECTORY,... : a dynamic-voter cluster's first voter set (the same on every node "
    "formatted before the cluster first starts, including nodes to be added later).",
)
@click.option("--standalone", is_flag=True, help="A dynamic-voter cluster of this node alone; add the others later.")
@click.option("--listen", help="HOST:PORT this node listens on (with --standalone).")
@click.option("--directory-id", help="Use this directory id instead of a fresh random one (ids given to --initial-voters).")
@click.option(
    "--join",
    is_flag=True,
    help="This disk joins a running cluster (a new node, or a replaced disk): a fresh directory id even if "
    "--initial-voters names this node, so it starts as an observer until add-voter.",
)
def format_command(
    data_dir: Path,
    node_id: int,
    cluster_id: str,
    initial_voters: str | None,
    standalone: bool,
    listen: str | None,
    directory_id: str | None,
    join: bool,
) -> None:
    """Format an empty DATA_DIR: node id, cluster id and a fresh random
    directory id in meta.json (KIP-853). Without --initial-voters or
    --standalone the cluster's voters are the static --voters list given at
    start-up."""
    try:
        check_cluster_id(cluster_id, "--cluster-id")
        if standalone and initial_voters:
            raise ValueError("give --standalone or --initial-voters, not both")
        voters: tuple[Voter, ...] = ()
        if join and not initial_voters:
            raise ValueError("--join needs --initial-voters: the cluster's first voter set, as its nodes were formatted")
        if join and standalone:
            raise ValueError("give --join or --standalone, not both")
        if initial_voters:
            voters = parse_initial_voters(initial_voters)
            mine = [voter for voter in voters if voter.node_id == node_id]
            if join:
                # KIP-853: a replaced disk is another replica. Taking the id
                # the list names would let it vote as the disk it replaces,
                # whose votes and acknowledgements were lost with it.
                if mine and directory_id == mine[0].directory_id:
                    raise ValueError(
                        f"--join takes a fresh directory id: {directory_id} is the one node {node_id}'s old disk had"
                    )
                directory_id = directory_id or new_directory_id()
            elif mine and directory_id is None:
                # This node is one of the initial voters: its directory id is
                # the one the list names, or no other node could count it.
                directory_id = mine[0].directory_id
            elif mine and mine[0].directory_id != directory_id:
                raise ValueError(
                    f"--directory-id {directory_id} differs from the one --initial-voters names for node {node_id}"
                )
        if standalone:
            if listen is None:
                raise ValueError("--standalone needs --listen HOST:PORT (where the other nodes will find this one)")
            endpoint_address(listen)
            directory_id = directory_id or new_directory_id()
            voters = (Voter(node_id, directory_id, (listen,)),)
        identity = format_data_dir(
            data_dir, node_id=node_id, cluster_id=cluster_id, directory_id=directory_id, bootstrap_voters=voters
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    except StorageOwnershipError as error:
        raise CommandError(str(error), hint="Format only an empty directory.") from error
    click.echo(
        json.dumps(
            {
                "data_dir": str(data_dir),
                "node_id": identity.node_id,
                "cluster_id": identity.cluster_id,
                "directory_id": identity.directory_id,
                "voters": "dynamic" if identity.bootstrap_voters else "static",
                "bootstrap_voters": [
                    f"{voter.node_id}@{','.join(voter.endpoints)}:{voter.directory_id}"
                    for voter in identity.bootstrap_voters
                ],
            }
        )
    )


@main.command("check-storage")
@click.argument("data_dir", type=click.Path(path_type=Path))
def check_storage_command(data_dir: Path) -> None:
    """Verify every checksum of a stopped node's DATA_DIR, read-only.

    Exit status: 0 sound, 1 torn tail (the next start cuts it), 3 damaged
    (the node refuses to start), 4 not a data directory, 5 in use.
    """
    report, exit_code = check_storage_report(data_dir)
    click.echo(report)
    raise click.exceptions.Exit(exit_code)

def _id_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise click.BadParameter(f"expected ids like 1,2,3, got {text!r}") from None


@main.command("certs")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False, path_type=Path), help="Where to write them.")
@click.option("--nodes", required=True, help="Node ids: 1,2,3.")
@click.option("--brokers", default="", help="Broker ids: 7,8.")
@click.option("--clients", default="admin", show_default=True, help="Client names: admin,harness.")
@click.option("--valid-days", type=click.IntRange(min=1), default=365, show_default=True)
def certs_command(directory: Path, nodes: str, brokers: str, clients: str, valid_days: int) -> None:
    """Make a development CA in DIR (or reuse the one there) and a
    certificate and key per node, broker and client, with the principal
    (pykraft://node/ID, ...) in the subjectAltName; an ACL file granting
    admin to the client named admin when DIR has none. For development and tests:
    production uses its own CA (docs/security.md)."""
    from .runtime import create_cluster_certificates

    client_names = [name.strip() for name in clients.split(",") if name.strip()]
    try:
        written = create_cluster_certificates(
            directory, nodes=_id_list(nodes), brokers=_id_list(brokers), clients=client_names, valid_days=valid_days
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    for path in written:
        click.echo(str(path))


if __name__ == "__main__":  # pragma: no cover
    main()
