"""``kraft-controller``, ``kraft-topics`` and ``kraft-cluster``."""

from __future__ import annotations

import json
from typing import Any

import click
import trio

from quorum.cli import checked_bootstrap, node_config_or_usage_error, node_options, node_settings, serve_until_signalled, timeout_option
from quorum.cli_errors import CommandError, ReportingCommand, ReportingGroup
from quorum.cli_tls import with_client_tls

from ._controller import ControllerConfig
from ._errors import ErrorCode
from ._lifecycle import BrokerState
from ._requests import DESCRIBE_PARTITIONS_MAX, DescribeTopicsResponse
from ._service import open_controller_node
from .client import AdminClient

# How often ``kraft-topics create`` looks again for Online brokers.
_BROKER_POLL_S = 0.2


@click.command("kraft-controller", cls=ReportingCommand)
@node_options
@click.option("--session-timeout-ms", type=int, default=9000, show_default=True, help="Fence a broker not heard from for this long.")
@click.option("--heartbeat-interval-ms", type=int, default=2000, show_default=True, help="A broker gone this long may be replaced at once by a new incarnation.")
def controller_main(config_file: str | None, log_level: str, session_timeout_ms: int, heartbeat_interval_ms: int, **options: Any) -> None:
    """Run a quorum voter that is the cluster's controller while it leads."""
    config = node_config_or_usage_error(node_settings(config_file, log_level, options))
    try:
        controller_config = ControllerConfig(
            cluster_id=config.cluster_id, session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    trio.run(serve_until_signalled, config, lambda config: open_controller_node(config, controller_config))


_bootstrap = click.option(
    "--bootstrap", required=True, callback=checked_bootstrap, help="HOST:PORT[,...] or ID@HOST:PORT[,...] of the controllers."
)
_cluster = click.option("--cluster-id", default="pykraft", show_default=True)
_json = click.option("--json", "as_json", is_flag=True, help="Print the response as JSON.")


def _admin(bootstrap: str, cluster_id: str, timeout_s: float, tls: Any) -> AdminClient:
    return AdminClient(bootstrap.split(","), cluster_id=cluster_id, timeout_s=timeout_s, tls=tls)


@click.group("kraft-topics", cls=ReportingGroup)
def topics_main() -> None:
    """Create, delete, describe and list topics."""


async def _wait_for_online_brokers(admin: AdminClient, count: int, timeout_s: float) -> None:
    """Return once the cluster has ``count`` Online brokers, printing a
    progress line while it waits; raises ``CommandError`` after
    ``timeout_s``. A topic placed on fewer would be refused
    (INVALID_REPLICATION_FACTOR), and brokers come Online a moment after
    they start, so a script that starts brokers and then creates topics
    needs no sleep of its own."""
    deadline = trio.current_time() + timeout_s
    reported = None
    while True:
        cluster = await admin.describe_cluster()
        online = sum(broker.state == BrokerState.ONLINE.value for broker in cluster.brokers)
        if online >= count:
            return
        if trio.current_time() >= deadline:
            raise CommandError(
                f"no topic created: replication factor {count} needs {count} Online broker(s), and {online} of "
                f"{len(cluster.brokers)} registered are Online after {timeout_s:g} s.",
                hint="Start brokers (kraft-broker) until kraft-cluster describe shows them Online, or lower "
                "--replication-factor.",
            )
        if online != reported:
            click.echo(
                f"waiting up to {timeout_s:g} s for {count} Online broker(s): {online} of {len(cluster.brokers)} "
                f"registered are Online",
                err=True,
            )
            reported = online
        await trio.sleep(min(_BROKER_POLL_S, max(0.0, deadline - trio.current_time())))


@topics_main.command("create")
@_bootstrap
@_cluster
@timeout_option
@click.argument("name")
@click.option("--partitions", type=click.IntRange(1, 2**31 - 1), default=1, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 32767), default=1, show_default=True)
@click.option("--unclean-leader-election", is_flag=True)
@with_client_tls
def topics_create(
    bootstrap: str,
    cluster_id: str,
    timeout_s: float,
    name: str,
    partitions: int,
    replication_factor: int,
    unclean_leader_election: bool,
    tls: Any,
) -> None:
    """Create topic NAME, first waiting (up to --timeout-s) until enough
    brokers are Online to hold its replicas."""

    async def call() -> Any:
        async with _admin(bootstrap, cluster_id, timeout_s, tls) as admin:
            await _wait_for_online_brokers(admin, replication_factor, timeout_s)
            return await admin.create_topic(
                name, partitions=partitions, replication_factor=replication_factor, unclean_leader_election=unclean_leader_election
            )

    response = trio.run(call)
    if response.error:
        raise CommandError(f"no topic created: {response.message or response.error.name} ({response.error.name}).")
    for result in response.results or ():
        if result.error:
            raise CommandError(f"topic {result.name!r} was not created: {result.message} ({result.error.name}).")
        click.echo(f"created {result.name} ({result.topic_id})")


@topics_main.command("delete")
@_bootstrap
@_cluster
@timeout_option
@click.argument("names", nargs=-1, required=True)
@with_client_tls
def topics_delete(bootstrap: str, cluster_id: str, timeout_s: float, names: tuple[str, ...], tls: Any) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id, timeout_s, tls) as admin:
            return await admin.delete_topics(list(names))

    response = trio.run(call)
    failed = bool(response.error)
    for result in response.results:
        failed |= bool(result.error)
        click.echo(f"{result.name}: {'deleted' if not result.error else result.error.name + ' ' + result.message}")
    if failed:
        raise SystemExit(1)


@topics_main.command("describe")
@_bootstrap
@_cluster
@timeout_option
@_json
@click.option("--linearizable", is_flag=True, help="Through a ReadIndex round, not the leader's local state.")
@click.argument("names", nargs=-1)
@with_client_tls
def topics_describe(bootstrap: str, cluster_id: str, timeout_s: float, as_json: bool, linearizable: bool, names: tuple[str, ...], tls: Any) -> None:
    """Describe topics NAMES (all topics without names); exit status 1 if
    any of them does not exist."""

    async def call() -> Any:
        async with _admin(bootstrap, cluster_id, timeout_s, tls) as admin:
            if names:
                return await admin.describe_topics(list(names), linearizable=linearizable)
            return await _describe_every_topic(admin, linearizable)

    response = trio.run(call)
    if response.error:
        raise CommandError(f"the controller refused: {response.message} ({response.error.name}).")
    failed = [topic for topic in response.topics if topic.error]
    if as_json:
        click.echo(json.dumps(response.to_wire(), default=str))
    else:
        click.echo(f"(image offset {response.offset})")
    for topic in response.topics:
        if as_json or topic.error:
            continue
        click.echo(f"Topic: {topic.name}  TopicId: {topic.topic_id}  PartitionCount: {len(topic.partitions)}")
        for partition in topic.partitions:
            click.echo(
                f"    Partition: {partition.partition_id}  Leader: {partition.leader}  LeaderEpoch: {partition.leader_epoch}"
                f"  Replicas: {list(partition.replicas)}  Isr: {list(partition.isr)}"
            )
    if failed:
        unknown = [topic.name for topic in failed if topic.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        other = [f"{topic.name} ({topic.error.name})" for topic in failed if topic.name not in unknown]
        problems = []
        if unknown:
            problems.append(f"no topic named {', '.join(map(repr, unknown))}")
        if other:
            problems.append(f"could not describe {', '.join(other)}")
        raise CommandError("; ".join(problems) + ".", hint="kraft-topics list shows the topics there are.")


async def _describe_every_topic(admin: Any, linearizable: bool) -> Any:
    """Every topic, described a few at a time: listed first, then asked
    for in groups of at most ``DESCRIBE_PARTITIONS_MAX`` partitions (one
    DescribeTopics of everything is refused past that many). The answer is
    one ``DescribeTopicsResponse``, at the offset of the last group; a
    refused group's response is returned as it is."""
    groups: list[list[str]] = [[]]
    partitions_in_group = 0
    for listing in await admin.list_topics(linearizable=linearizable):
        if groups[-1] and partitions_in_group + listing.partition_count > DESCRIBE_PARTITIONS_MAX:
            groups.append([])
            partitions_in_group = 0
        groups[-1].append(listing.name)
        partitions_in_group += listing.partition_count
    topics: list[Any] = []
    offset = -1
    for group in groups:
        if not group:
            continue
        response = await admin.describe_topics(group, linearizable=linearizable)
        if response.error:
            return response
        topics.extend(response.topics)
        offset = response.offset
    return DescribeTopicsResponse(offset=offset, topics=tuple(topics))


@topics_main.command("list")
@_bootstrap
@_cluster
@timeout_option
@with_client_tls
def topics_list(bootstrap: str, cluster_id: str, timeout_s: float, tls: Any) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id, timeout_s, tls) as admin:
            return await admin.list_topics()

    for listing in trio.run(call):
        click.echo(listing.name)


@click.group("kraft-cluster", cls=ReportingGroup)
def cluster_main() -> None:
    """Inspect the cluster's brokers."""


@cluster_main.command("describe")
@_bootstrap
@_cluster
@timeout_option
@_json
@click.option("--linearizable", is_flag=True)
@click.option("--controllers", is_flag=True, help="The registered controllers (KIP-919) in place of the brokers.")
@with_client_tls
def cluster_describe(
    bootstrap: str, cluster_id: str, timeout_s: float, as_json: bool, linearizable: bool, controllers: bool, tls: Any
) -> None:
    """Brokers with state, epoch and incarnation; topic and partition counts.
    With --controllers: each registered controller's listeners, directory
    id and supported features."""

    async def call() -> Any:
        async with _admin(bootstrap, cluster_id, timeout_s, tls) as admin:
            if controllers:
                return await admin.describe_controllers(linearizable=linearizable)
            return await admin.describe_cluster(linearizable=linearizable)

    response = trio.run(call)
    if as_json:
        click.echo(json.dumps(response.to_wire(), default=str))
        return
    if controllers:
        click.echo(f"{len(response.controllers)} controller(s) registered  (image offset {response.offset})")
        click.echo(f"{'ControllerId':>12}  {'Listeners':<28} {'Directory':<34} Features")
        for controller in response.controllers:
            listeners = ",".join(f"{name}://{host}:{port}" for name, host, port in controller.listeners)
            features = ",".join(f"{name}={low}-{high}" for name, low, high in controller.features)
            click.echo(f"{controller.controller_id:>12}  {listeners:<28} {controller.directory_id or '-':<34} {features}")
        return
    click.echo(
        f"cluster {response.cluster_id}  (image offset {response.offset})  topics {response.topic_count}"
        f"  partitions {response.partition_count}  offline {response.offline_partition_count}"
    )
    click.echo(f"{'BrokerId':>8}  {'State':<9} {'Epoch':>8}  {'LastHeartbeat':>13}  Incarnation")
    for broker in response.brokers:
        heard = "-" if broker.last_heartbeat_ms_ago is None else f"{broker.last_heartbeat_ms_ago} ms ago"
        click.echo(f"{broker.broker_id:>8}  {broker.state:<9} {broker.broker_epoch:>8}  {heard:>13}  {broker.incarnation_id}")
