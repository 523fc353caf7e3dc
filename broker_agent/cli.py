"""``kraft-broker``: run one broker until SIGTERM or SIGINT.

    kraft-broker --broker-id 101 --bootstrap 1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093 \\
        --listen 127.0.0.1:9201 --plaintext [--rack r1] [--data-dir data/b101] [--event-log b101.events.jsonl]

The first SIGTERM or SIGINT starts a controlled shutdown (the controller
moves this broker's leaderships off, then says shut down; bounded by
``--shutdown-timeout-ms``); a second one exits at once. Exit status: 0
after a clean stop, 1 when the cluster refused the broker; other errors
are reported as ``quorum.cli_errors`` says (docs/operations.md, "Errors and
exit codes").
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click
import trio

from quorum import listen_address
from quorum.cli import reload_on_sighup
from quorum.cli_errors import LOG_LEVELS, ReportingCommand, record_listen_addresses
from quorum.cli_tls import listener_tls
from quorum.runtime import parse_voters

from ._agent import open_broker
from ._config import BrokerConfig

log = logging.getLogger("pykraft.broker")


@click.command("kraft-broker", cls=ReportingCommand)
@click.option("--broker-id", type=int, required=True, help="This broker's id (not a controller voter id).")
@click.option("--bootstrap", required=True, help="ID@HOST:PORT,... of one controller voter or more, for the first contact (the leader and the voter set are learned from them).")
@click.option("--listen", required=True, help="HOST:PORT for clients (port 0: any free port).")
@click.option("--rack", default=None, help="This broker's rack, for replica placement.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Keep the metadata log here (default: memory).")
@click.option("--cluster-id", default="pykraft", show_default=True)
@click.option("--event-log", type=click.Path(dir_okay=False), default=None, help="Append state changes, registrations and epoch-carrying requests here as JSON lines.")
@click.option("--metrics", "metrics_listen", default=None, help="HOST:PORT for Prometheus /metrics.")
@click.option("--session-timeout-ms", type=int, default=9000, show_default=True, help="Self-fence after this long without a fresh metadata fetch.")
@click.option("--heartbeat-interval-ms", type=int, default=2000, show_default=True, help="Caps the registration retry backoff.")
@click.option("--shutdown-timeout-ms", type=int, default=30000, show_default=True, help="Give up a controlled shutdown after this long.")
@click.option("--election-timeout-ms", type=int, default=None, help="The quorum's (give the controllers' value).")
@click.option("--fetch-timeout-ms", type=int, default=None, help="The quorum's (give the controllers' value).")
@click.option("--fsync/--no-fsync", default=True, help="fsync the metadata log (with --data-dir).")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), help="CA bundle (PEM) controllers and clients are checked against.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="This broker's certificate (PEM; SAN pykraft://broker/ID).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="This broker's private key (PEM).")
@click.option("--acl-file", type=click.Path(exists=True, dir_okay=False), help="Which clients may read (reloaded on SIGHUP).")
@click.option("--plaintext", is_flag=True, help="Run without TLS (teaching, quick starts): this or the --tls-* files.")
@click.option("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
def main(
    broker_id: int,
    bootstrap: str,
    listen: str,
    rack: str | None,
    data_dir: str | None,
    cluster_id: str,
    event_log: str | None,
    metrics_listen: str | None,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    shutdown_timeout_ms: int,
    election_timeout_ms: int | None,
    fetch_timeout_ms: int | None,
    fsync: bool,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    acl_file: str | None,
    plaintext: bool,
    log_level: str,
) -> None:
    """Run a broker: register with the controller, fetch the metadata log,
    serve clients while Online."""
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    quorum: dict[str, Any] = {}
    if election_timeout_ms is not None:
        quorum["election_timeout_ms"] = election_timeout_ms
    if fetch_timeout_ms is not None:
        quorum["fetch_timeout_ms"] = fetch_timeout_ms
    tls = listener_tls({"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key, "plaintext": plaintext}, config_file=False)
    try:
        config = BrokerConfig(
            broker_id=broker_id,
            bootstrap=parse_voters(bootstrap),
            listen=listen_address(listen, "listen address"),
            cluster_id=cluster_id,
            rack=rack,
            data_dir=data_dir,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            shutdown_timeout_ms=shutdown_timeout_ms,
            metrics_listen=listen_address(metrics_listen, "metrics address") if metrics_listen else None,
            event_log=event_log,
            fsync=fsync,
            controlled_shutdown_on_exit=False,  # signals drive it here
            quorum=quorum,
            tls=tls,
            plaintext=tls is None,
            acl_file=acl_file,
        )
    except (ValueError, TypeError) as error:
        raise click.UsageError(str(error)) from error
    refused = trio.run(serve, config)
    raise SystemExit(1 if refused else 0)


async def serve(config: BrokerConfig) -> bool:
    """Run the broker until it stops; returns True when the cluster refused
    it. The first SIGTERM/SIGINT starts a controlled shutdown, a second one
    exits at once."""
    record_listen_addresses({"--listen": config.listen, "--metrics": config.metrics_listen})
    if config.data_dir is None:
        log.info(
            "broker %d has no --data-dir: its copy of the metadata log lives in memory and is fetched again "
            "after a restart",
            config.broker_id,
        )
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with open_broker(config) as broker:
            log.info("broker %d serving on port %s (incarnation %s)", config.broker_id, broker.listen_port, broker.incarnation_id)
            async with trio.open_nursery() as nursery:

                async def on_signals() -> None:
                    received = 0
                    async for signum in signals:
                        if signum == signal.SIGHUP:
                            reload_on_sighup(broker.node, log)
                            continue
                        received += 1
                        name = signal.Signals(signum).name
                        if received == 1:
                            log.info("broker %d got %s: controlled shutdown", config.broker_id, name)
                            broker.request_shutdown()
                        else:
                            log.info("broker %d got %s again: exiting now", config.broker_id, name)
                            nursery.cancel_scope.cancel()

                nursery.start_soon(on_signals)
                await broker.wait_stopped()
                nursery.cancel_scope.cancel()
            log.info("broker %d stopped: %s", config.broker_id, broker.stop_reason)
            return broker.stop_error


if __name__ == "__main__":  # pragma: no cover
    main()
