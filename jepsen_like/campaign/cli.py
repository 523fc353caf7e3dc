"""``jepsen-like campaign``: run one fault-injection campaign and check it."""

from __future__ import annotations

import logging
import re
import signal
import sys
from pathlib import Path
from typing import Any

import click
import trio

from ._allocator import fix_mmap_threshold
from ._progress import LiveProgress, PlainProgress
from ._options import CampaignOptions
from ._runner import Campaign, CampaignResult
from ._scenarios import NEMESIS_SCENARIOS
from ._workloads import WORKLOADS


_DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600}
#: The longest run --duration accepts (a typo such as 200h is refused).
DURATION_MAX_S = 48 * 3600


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h`` or ``1.5h`` (a bare number is seconds) as
    seconds. Raises ``ValueError`` for anything else, zero, or more than
    ``DURATION_MAX_S``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 30m or 2h")
    seconds = float(match.group(1)) * _DURATION_UNITS_S[match.group(2) or "s"]
    if not 0 < seconds <= DURATION_MAX_S:
        raise ValueError(f"{text!r}: a duration must be more than 0 and at most {DURATION_MAX_S // 3600}h")
    return seconds


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


@click.command("campaign")
@click.option("--system", type=click.Choice(["pykraft", "kafka"]), default="pykraft", show_default=True, help="kafka: Apache Kafka 4.4's KRaft (make kafka fetches it; docs/kafka-campaign.md).")
@click.option("--kafka-heap-mb", type=click.IntRange(128, 4096), default=256, show_default=True, help="Heap of each Kafka JVM (--system kafka).")
@click.option("--scenario", type=click.Choice(sorted(NEMESIS_SCENARIOS)), default="chaos", show_default=True)
@click.option("--time-limit", "time_limit_s", type=Duration(), default=60.0, show_default=True, metavar="SECONDS", help="Seconds of workload and faults (more than 0; a unit may follow, as for --duration).")
@click.option("--duration", "duration_s", type=Duration(), default=None, metavar="90s|30m|2h", help="The same as --time-limit, with a unit (s, m or h): for long runs.")
@click.option("--controllers", type=click.IntRange(1, 9), default=3, show_default=True, help="kraft-controller voters.")
@click.option("--brokers", type=click.IntRange(0, 20), default=3, show_default=True, help="kraft-broker processes (0: none).")
@click.option("--workload", type=click.Choice(WORKLOADS), default="mixed", show_default=True)
@click.option("--clients", type=click.IntRange(1, 64), default=6, show_default=True, help="Concurrent client tasks.")
@click.option("--read-mode", type=click.Choice(["linearizable", "leader-local"]), default=None, help="Register reads. Default: leader-local for zombie-leader, else linearizable.")
@click.option("--check-quorum/--no-check-quorum", default=True, help="KAFKA-15489 leader progress timeout.")
@click.option("--net", type=click.Choice(["proxy", "netns"]), default="proxy", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=Path("store"), show_default=True)
@click.option("--no-check", is_flag=True, help="Record only; do not run the checker.")
@click.option("--checker", type=click.Choice(["spark", "reference"]), default="spark", show_default=True, help="reference: the checker's pure-Python twin (short runs only).")
@click.option("--tls/--no-tls", default=False, show_default=True, help="Mutual TLS on every connection: a CA and certificates per run (docs/security.md); off, every node and broker runs --plaintext.")
@click.option("--auto-join", is_flag=True, help="membership only: every controller runs --auto-join (KIP-853); a replaced voter's new disk rejoins by auto-join once its old one is removed.")
@click.option("--plain", is_flag=True, help="Plain progress lines even on a terminal.")
@click.option("--prometheus", is_flag=True, help="Start Debian's Prometheus scraping every node; the report links its queries.")
@click.option("--replay", "replay_path", type=click.Path(exists=True, path_type=Path), default=None, help="Run a recorded schedule again (a run directory or a schedule file; docs/replay.md): its nodes, timers, faults and operations, instead of --scenario.")
@click.option("--from-sim", "from_sim", type=str, default=None, metavar="SCENARIO", help="Run what simulator scenario SCENARIO did with --seed (and --check-quorum) as a schedule on real processes (docs/replay.md).")
def campaign_command(
    system: str,
    kafka_heap_mb: int,
    scenario: str,
    time_limit_s: float,
    duration_s: float | None,
    controllers: int,
    brokers: int,
    workload: str,
    clients: int,
    read_mode: str | None,
    check_quorum: bool,
    net: str,
    seed: int,
    store: Path,
    no_check: bool,
    checker: str,
    tls: bool,
    auto_join: bool,
    plain: bool,
    prometheus: bool,
    replay_path: Path | None,
    from_sim: str | None,
) -> None:
    """Run a cluster of real processes under faults, record the history and
    check it. Exits 0 only when the history is valid."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    if duration_s is not None:
        if click.get_current_context().get_parameter_source("time_limit_s") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("--duration and --time-limit both give the run's length: pick one")
        time_limit_s = duration_s
    options = CampaignOptions(
        system=system,
        kafka_heap_mb=kafka_heap_mb,
        scenario=scenario,
        time_limit_s=time_limit_s,
        controllers=controllers,
        brokers=brokers,
        workload=workload,
        clients=clients,
        read_mode=read_mode or ("leader-local" if scenario == "zombie-leader" else "linearizable"),
        check_quorum=check_quorum,
        net=net,
        seed=seed,
        store=store,
        check=not no_check,
        checker=checker,
        tls=tls,
        prometheus=prometheus,
        auto_join=auto_join,
    )
    if replay_path is not None or from_sim is not None:
        scenario = _follow_schedule(options, replay_path, from_sim)
    if prometheus:
        from jepsen_like.prometheus import MISSING_REASON, installed

        if not installed():
            raise click.UsageError(f"--prometheus: {MISSING_REASON}")
        if net != "proxy":
            raise click.UsageError("--prometheus needs --net proxy (the metrics endpoints must be on this host's loopback)")
    display: Any = LiveProgress() if sys.stdout.isatty() and not plain else PlainProgress()
    if system == "kafka":
        from ._kafka_target import client_problem
        from .kafka import kafka_problem

        problem = kafka_problem() or client_problem()
        if problem:
            raise click.UsageError(problem)
    try:
        campaign = Campaign(options, status=display.status)
    except ValueError as error:
        raise click.UsageError(str(error)) from None

    async def main() -> CampaignResult:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(display.run, campaign)
            result = await campaign.run()
            nursery.cancel_scope.cancel()
        return result

    # Once the options are good and before any thread or TLS connection
    # exists: a long run's heap must not grow with the connections it
    # opens (_allocator.py).
    fix_mmap_threshold()
    # SIGTERM unwinds like Ctrl-C, so every process and network device the
    # run created is removed on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        result = trio.run(main)
    except BaseException as error:
        if not _interrupted(error):
            raise
        click.echo(f"\n--- {scenario}: INTERRUPTED; every node process and network device of the run was removed")
        click.echo(f"    run directory (partial): {campaign.run_dir}")
        sys.exit(130)
    for line in verdict_lines(scenario, result):
        click.echo(line)
    sys.exit(campaign_exit_status(result, checked=not no_check))


def campaign_exit_status(result: CampaignResult, *, checked: bool) -> int:
    """0 for a valid history, and for a run recorded with ``--no-check``
    (what was asked: a script may check it next); 1 for anything else: an
    invalid or unknown history, or a checker that failed."""
    if result.valid is True:
        return 0
    if not checked and result.valid is None and result.checker_error is None:
        return 0
    return 1


def _follow_schedule(options: CampaignOptions, replay_path: Path | None, from_sim: str | None) -> str:
    """Set ``options`` to follow a schedule: a recorded one (``--replay``)
    or a simulator scenario's run (``--from-sim``). Returns the name the
    verdict shows. Raises UsageError for a schedule that cannot run."""
    from jepsen_like.sim import SCENARIOS, ScheduleError, schedule_of_scenario

    from ._replay import options_for, read_schedule

    if replay_path is not None and from_sim is not None:
        raise click.UsageError("--replay and --from-sim each give a schedule: pick one")
    if options.system != "pykraft":
        raise click.UsageError("a schedule runs on pykraft's own nodes (--system pykraft)")
    try:
        if replay_path is not None:
            schedule = read_schedule(replay_path)
        else:
            if from_sim not in SCENARIOS:
                raise click.UsageError(f"--from-sim: unknown scenario {from_sim!r}; known: {', '.join(sorted(SCENARIOS))}")
            schedule, result = schedule_of_scenario(from_sim, options.seed, check_quorum=options.check_quorum)
            verdict = "VALID" if result.valid else f"INVALID ({result.failure_class}: {(result.violation or '').splitlines()[0]})"
            click.echo(f"simulator: {from_sim} seed {options.seed}: {verdict}; {len(schedule.faults)} faults, {len(schedule.operations)} operations")
        options_for(schedule, options)
    except ScheduleError as error:
        raise click.UsageError(str(error)) from None
    click.echo(
        f"schedule: {schedule.origin or 'given'}: {len(schedule.faults)} faults, {len(schedule.operations)} operations,"
        f" {schedule.duration_ms} ms, check quorum {'on' if schedule.timers.check_quorum else 'off'}"
    )
    return "replay"


def _interrupted(error: BaseException) -> bool:
    """Ctrl-C (or SIGTERM), also when trio delivers it inside an exception
    group from the run's nurseries."""
    if isinstance(error, KeyboardInterrupt):
        return True
    return isinstance(error, BaseExceptionGroup) and error.subgroup(KeyboardInterrupt) is not None


def verdict_lines(scenario: str, result: CampaignResult) -> list[str]:
    """The end of a run, in a few lines: the verdict, anomalies by kind,
    operations and faults counted, where the report is."""
    verdict = {True: "VALID", False: "INVALID", None: "NOT CHECKED"}.get(result.valid, str(result.valid).upper())  # type: ignore[arg-type]
    ops = result.ops
    lines = [
        f"--- {scenario}: {verdict}",
        f"    operations: {result.operations} (ok {ops.get('ok', 0)}, fail {ops.get('fail', 0)}, info {ops.get('info', 0)})",
        f"    faults: {result.faults}" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(result.faults_by_kind.items()))})" if result.faults_by_kind else ""),
    ]
    if result.anomalies:
        lines.append("    anomalies: " + ", ".join(f"{name} x{count}" for name, count in sorted(result.anomalies.items())))
    elif result.valid is not None:
        lines.append("    anomalies: none")
    if result.checker_error:
        lines.append(f"    checker error: {result.checker_error}")
    if result.peak_rss_bytes:
        lines.append(
            f"    harness peak memory (RSS): {result.peak_rss_recording_bytes / 2**20:.0f} MiB while recording,"
            f" {result.peak_rss_bytes / 2**20:.0f} MiB with the checker and the report"
        )
    if result.rss_growth_per_operation_bytes is not None:
        lines.append(
            f"    harness memory growth after the first quarter: {result.rss_growth_per_operation_bytes:.0f} B of RSS"
            f" and {result.python_blocks_per_operation:.2f} Python blocks per operation (memory.csv)"
        )
    if result.disk_bytes:
        lines.append(f"    run directory: {result.run_dir} ({result.disk_bytes / 2**20:.1f} MiB)")
    else:
        lines.append(f"    run directory: {result.run_dir}")
    if result.report is not None:
        lines.append(f"    report: {result.report}")
    return lines
