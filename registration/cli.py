"""``kraft-controller``, ``kraft-topics`` and ``kraft-cluster``."""

from __future__ import annotations

import json
from typing import Any

import click
import trio

from quorum.cli import node_config_or_usage_error, node_options, node_settings, serve_until_signalled

from ._controller import ControllerConfig
from ._service import open_controller_node
from .client import AdminClient


@click.command("kraft-controller")
@node_options
@click.option("--session-timeout-ms", type=int, default=9000, show_default=True, help="Fence a broker not heard from for this long.")
@click.option("--heartbeat-interval-ms", type=int, default=2000, show_default=True, help="A broker gone this long may be replaced at once by a new incarnation.")
def controller_main(config_file: str | None, log_level: str, session_timeout_ms: int, heartbeat_interval_ms: int, **options: Any) -> None:
    """Run a quorum voter that is the cluster's controller while it leads."""
    config = node_config_or_usage_error(node_settings(config_file, log_level, options))
    controller_config = ControllerConfig(
        cluster_id=config.cluster_id, session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms
    )
    trio.run(serve_until_signalled, config, lambda config: open_controller_node(config, controller_config))


_bootstrap = click.option("--bootstrap", required=True, help="HOST:PORT[,...] or ID@HOST:PORT[,...] of the controllers.")
_cluster = click.option("--cluster-id", default="pykraft", show_default=True)
_json = click.option("--json", "as_json", is_flag=True, help="Print the response as JSON.")


def _admin(bootstrap: str, cluster_id: str) -> AdminClient:
    return AdminClient(bootstrap.split(","), cluster_id=cluster_id)


def _run(call: Any) -> Any:
    try:
        return trio.run(call)
    except Exception as error:  # noqa: BLE001 - one sentence for the user
        raise click.ClickException(str(error)) from error


@click.group("kraft-topics")
def topics_main() -> None:
    """Create, delete, describe and list topics."""


@topics_main.command("create")
@_bootstrap
@_cluster
@click.argument("name")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--replication-factor", type=int, default=1, show_default=True)
@click.option("--unclean-leader-election", is_flag=True)
def topics_create(bootstrap: str, cluster_id: str, name: str, partitions: int, replication_factor: int, unclean_leader_election: bool) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id) as admin:
            return await admin.create_topic(
                name, partitions=partitions, replication_factor=replication_factor, unclean_leader_election=unclean_leader_election
            )

    response = _run(call)
    failed = False
    for result in response.results or ():
        if result.error:
            failed = True
            click.echo(f"{result.name}: {result.error.name} {result.message}")
        else:
            click.echo(f"created {result.name} ({result.topic_id})")
    if response.error:
        raise click.ClickException(f"{response.error.name}: {response.message}")
    if failed:
        raise SystemExit(1)


@topics_main.command("delete")
@_bootstrap
@_cluster
@click.argument("names", nargs=-1, required=True)
def topics_delete(bootstrap: str, cluster_id: str, names: tuple[str, ...]) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id) as admin:
            return await admin.delete_topics(list(names))

    response = _run(call)
    failed = bool(response.error)
    for result in response.results:
        failed |= bool(result.error)
        click.echo(f"{result.name}: {'deleted' if not result.error else result.error.name + ' ' + result.message}")
    if failed:
        raise SystemExit(1)


@topics_main.command("describe")
@_bootstrap
@_cluster
@_json
@click.option("--linearizable", is_flag=True, help="Through a ReadIndex round, not the leader's local state.")
@click.argument("names", nargs=-1)
def topics_describe(bootstrap: str, cluster_id: str, as_json: bool, linearizable: bool, names: tuple[str, ...]) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id) as admin:
            return await admin.describe_topics(list(names) or None, linearizable=linearizable)

    response = _run(call)
    if as_json:
        click.echo(json.dumps(response.to_wire(), default=str))
        return
    click.echo(f"(image offset {response.offset})")
    for topic in response.topics:
        if topic.error:
            click.echo(f"{topic.name}: {topic.error.name}")
            continue
        click.echo(f"Topic: {topic.name}  TopicId: {topic.topic_id}  PartitionCount: {len(topic.partitions)}")
        for partition in topic.partitions:
            click.echo(
                f"    Partition: {partition.partition_id}  Leader: {partition.leader}  LeaderEpoch: {partition.leader_epoch}"
                f"  Replicas: {list(partition.replicas)}  Isr: {list(partition.isr)}"
            )


@topics_main.command("list")
@_bootstrap
@_cluster
def topics_list(bootstrap: str, cluster_id: str) -> None:
    async def call() -> Any:
        async with _admin(bootstrap, cluster_id) as admin:
            return await admin.describe_topics(None)

    for topic in sorted(_run(call).topics, key=lambda topic: topic.name):
        click.echo(topic.name)


@click.group("kraft-cluster")
def cluster_main() -> None:
    """Inspect the cluster's brokers."""


@cluster_main.command("describe")
@_bootstrap
@_cluster
@_json
@click.option("--linearizable", is_flag=True)
def cluster_describe(bootstrap: str, cluster_id: str, as_json: bool, linearizable: bool) -> None:
    """Brokers with state, epoch and incarnation; topic and partition counts."""

    async def call() -> Any:
        async with _admin(bootstrap, cluster_id) as admin:
            return await admin.describe_cluster(linearizable=linearizable)

    response = _run(call)
    if as_json:
        click.echo(json.dumps(response.to_wire(), default=str))
        return
    click.echo(
        f"cluster {response.cluster_id}  (image offset {response.offset})  topics {response.topic_count}"
        f"  partitions {response.partition_count}  offline {response.offline_partition_count}"
    )
    click.echo(f"{'BrokerId':>8}  {'State':<9} {'Epoch':>8}  {'LastHeartbeat':>13}  Incarnation")
    for broker in response.brokers:
        heard = "-" if broker.last_heartbeat_ms_ago is None else f"{broker.last_heartbeat_ms_ago} ms ago"
        click.echo(f"{broker.broker_id:>8}  {broker.state:<9} {broker.broker_epoch:>8}  {heard:>13}  {broker.incarnation_id}")
