"""``jepsen-like campaign``: run one fault-injection campaign and check it."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click
import trio

from ._runner import NEMESIS_SCENARIOS, Campaign, CampaignOptions


@click.command("campaign")
@click.option("--scenario", type=click.Choice(sorted(NEMESIS_SCENARIOS)), default="chaos", show_default=True)
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True, help="Seconds of workload and faults.")
@click.option("--controllers", type=int, default=3, show_default=True)
@click.option("--read-mode", type=click.Choice(["linearizable", "leader-local"]), default=None, help="Default: leader-local for zombie-leader, else linearizable.")
@click.option("--check-quorum/--no-check-quorum", default=True, help="KAFKA-15489 leader progress timeout.")
@click.option("--net", type=click.Choice(["proxy", "netns"]), default="proxy", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=Path("store"), show_default=True)
@click.option("--no-check", is_flag=True, help="Record only; do not run the Spark checker.")
def campaign_command(
    scenario: str,
    time_limit_s: float,
    controllers: int,
    read_mode: str | None,
    check_quorum: bool,
    net: str,
    seed: int,
    store: Path,
    no_check: bool,
) -> None:
    """Run a cluster of real processes under faults, record the history and
    check it. Exits 0 only when the history is valid."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    options = CampaignOptions(
        scenario=scenario,
        time_limit_s=time_limit_s,
        controllers=controllers,
        read_mode=read_mode or ("leader-local" if scenario == "zombie-leader" else "linearizable"),
        check_quorum=check_quorum,
        net=net,
        seed=seed,
        store=store,
        check=not no_check,
    )
    on_terminal = sys.stdout.isatty()

    def status(line: str) -> None:
        click.echo(("\r\x1b[K" if on_terminal else "") + f"[campaign] {line}", nl=not on_terminal)

    campaign = Campaign(options, status=status)

    async def main() -> object:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_progress, campaign, status)
            result = await campaign.run()
            nursery.cancel_scope.cancel()
        return result

    # SIGTERM unwinds like Ctrl-C, so every process and network device the
    # run created is removed on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    result = trio.run(main)
    if on_terminal:
        click.echo("")
    verdict = {True: "VALID", False: "INVALID", None: "NOT CHECKED"}.get(result.valid, str(result.valid).upper())
    click.echo(f"--- {scenario}: {verdict}")
    click.echo(f"    ops: {result.ops}   faults: {result.faults}")
    if result.anomalies:
        click.echo(f"    anomalies: {result.anomalies}")
    if result.checker_error:
        click.echo(f"    checker error: {result.checker_error}")
    click.echo(f"    run directory: {result.run_dir}")
    if result.report is not None:
        click.echo(f"    report: {result.report}")
    sys.exit(0 if result.valid is True else 1)


async def _progress(campaign: Campaign, status: object) -> None:
    """A line every few seconds: elapsed, ops/s, ok/fail/info, faults."""
    started = trio.current_time()
    while True:
        await trio.sleep(5)
        history = campaign.history
        if history is None:
            continue
        counts = history.counts
        campaign.status(
            f"{trio.current_time() - started:5.0f} s  {history.ops_per_second():6.0f} ops/s  "
            f"ok {counts.get('ok', 0)} fail {counts.get('fail', 0)} info {counts.get('info', 0)}  "
            f"faults {campaign.faults_injected}"
        )
