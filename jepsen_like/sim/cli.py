"""``jepsen-like sim`` and ``jepsen-like sweep``.

``jepsen-like sim --from-campaign store/RUN`` replays a campaign's schedule
(or any schedule file) against the same cores, checks it, and shrinks it
when it fails (docs/replay.md); ``--from-playground FILE`` replays a
playground session.

Trace legend (one line per event; the first column is virtual time in ms):

- ``nN <role> eE leader=nL (reason)`` — node N changed role or epoch;
- ``client pP write k=v via nN: ok|fail|info`` — a client operation ended;
- ``client pP read k via nN (mode): ok VALUE|fail REASON``;
- ``nN CRASH`` / ``nN RESTART`` — process faults; ``PARTITION``, ``FLAP``,
  ``NEMESIS``, ``HEAL`` — network faults;
- with ``--trace full`` also every delivered message (``nN <- A->B Type eE ...``),
  every dropped one, and every commit.

In the broker scenarios (``fast-bounce``, ``broker-cut-from-controller``,
``controlled-shutdown``, ``broker-stampede``; ``--brokers N`` sets how many)
brokers are ``bNNN`` and also:

- ``nN CONTROLLER active|inactive`` — the controller on voter N;
- ``bN REGISTER attempt K -> nM`` / ``bN registration refused: ERROR`` —
  RegisterBroker;
- ``bN eE Old -> New (event: reason)`` — the broker's own lifecycle;
  ``bN STOP`` / ``bN EXIT`` — it stopped and its process ended;
- ``committed@O: bN eE Old -> New`` — its registration in the committed log;
- ``admin pP create_topic T via nN: ok|fail`` — the admin client's writes;
- ``client pP OP via bN (epoch E): fail STALE_BROKER_EPOCH`` — a request
  for an earlier incarnation, refused (other client reads with ``--trace full``);
- ``SHUTDOWN``, ``NEMESIS kill -9``, ``NEMESIS replay``, ``PARTITION bN |
  controllers`` — the scenario's faults.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from ._scenarios import SCENARIOS, default_options, run_scenario

# A saved session is a seed and a list of clicks: a few hundred KiB at most.
MAX_PLAYGROUND_FILE_BYTES = 8 * 1024 * 1024


def _replay_command(scenario: str, seed: int, check_quorum: bool, pre_vote: bool, brokers: int | None = None) -> str:
    flags = ("" if check_quorum else " --no-check-quorum") + ("" if pre_vote else " --no-pre-vote")
    flags += "" if brokers is None else f" --brokers {brokers}"
    return f"jepsen-like sim --scenario {scenario} --seed {seed}{flags}"


_BROKERS_OPTION = click.option(
    "--brokers",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Brokers in a broker scenario (its own default otherwise: 1,000 for broker-stampede).",
)


def _set_brokers(options: Any, scenario: str, brokers: int | None) -> None:
    """``--brokers``: the scenario's broker count, if it runs brokers."""
    if brokers is None:
        return
    if not hasattr(options, "brokers"):
        raise click.UsageError(f"--brokers: {scenario} runs no brokers")
    options.brokers = brokers


@click.command("sim")
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default="zombie-leader", show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--check-quorum/--no-check-quorum", default=True, help="KAFKA-15489 leader progress timeout.")
@click.option("--pre-vote/--no-pre-vote", default=True, help="KIP-996 pre-vote.")
@click.option("--json", "as_json", is_flag=True, help="End with a one-line JSON summary.")
@_BROKERS_OPTION
@click.option(
    "--trace",
    type=click.Choice(["story", "full", "none"]),
    default="story",
    show_default=True,
    help="story: role changes, faults, client ops; full: also every message.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained visual replay of the run to this HTML file.",
)
@click.option(
    "--from-playground",
    "playground_path",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Replay a session saved by the browser playground (JSON): prints its trace, byte for byte as the page shows it.",
)
@click.option(
    "--from-campaign",
    "campaign_path",
    type=click.Path(exists=True),
    default=None,
    help="Replay a recorded schedule (a campaign's run directory or a schedule file) against the same cores, check it, and shrink it when it fails (docs/replay.md).",
)
@click.option("--no-shrink", is_flag=True, help="With --from-campaign: replay and check only.")
def sim_command(
    scenario: str,
    seed: int,
    check_quorum: bool,
    pre_vote: bool,
    as_json: bool,
    brokers: int | None,
    trace: str,
    html_path: str | None,
    playground_path: str | None,
    campaign_path: str | None,
    no_shrink: bool,
) -> None:
    """Run one simulated scenario with one seed; exit 1 if it is invalid."""
    if playground_path is not None:
        _replay_playground(playground_path)
        return
    if campaign_path is not None:
        _replay_campaign(campaign_path, trace, shrink=not no_shrink)
        return
    options = default_options(scenario, seed)
    options.check_quorum = check_quorum
    options.pre_vote = pre_vote
    _set_brokers(options, scenario, brokers)
    if html_path is not None:
        from ._recorder import Recording

        options.recorder = Recording()
    click.echo(f"SEED={seed} scenario={scenario} options={json.dumps(options.describe(), sort_keys=True)}")
    sink = None if trace == "none" else click.echo
    result = run_scenario(scenario, seed, options, trace=sink, full_trace=trace == "full")
    verdict = "VALID" if result.valid else f"INVALID ({result.failure_class}: {result.violation})"
    click.echo(f"--- {scenario} seed={seed}: {verdict}")
    click.echo(
        f"    stale reads: {result.stale_reads}   leader resigned after: {_ms(result.leader_resign_ms)}"
        f"   failover: {_ms(result.failover_ms)}   ops: {result.ops}"
    )
    for example in result.stale_examples:
        click.echo(f"    stale: {json.dumps(example, sort_keys=True)}")
    if not result.valid:
        click.echo(f"    replay: {_replay_command(scenario, seed, check_quorum, pre_vote, brokers)}")
    if html_path is not None:
        from ._replay_html import write_replay

        command = f"{_replay_command(scenario, seed, check_quorum, pre_vote, brokers)} --html {html_path}"
        click.echo(f"    replay page: {write_replay(result, html_path, command=command)}")
    if as_json:
        click.echo(json.dumps(result.summary(), sort_keys=True, default=str))
    sys.exit(0 if result.valid else 1)


def _replay_playground(path: str) -> None:
    """Print a saved playground session's trace on stdout (nothing else:
    it diffs against the page's), its verdict on stderr; exit 1 if an
    invariant broke, 2 for a file that is not a session."""
    from ._playground import FORMAT, PlaygroundError, replay_trace

    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_PLAYGROUND_FILE_BYTES + 1)
        if len(raw) > MAX_PLAYGROUND_FILE_BYTES:
            raise PlaygroundError(f"larger than {MAX_PLAYGROUND_FILE_BYTES} bytes")
        try:
            document = json.loads(raw)
        except RecursionError:
            raise PlaygroundError("its JSON nests too deeply") from None
        playground = replay_trace(document, click.echo)
    except (OSError, ValueError) as bad:  # PlaygroundError and JSONDecodeError are ValueErrors
        click.echo(f"error: {path} is not a playground session (format {FORMAT}): {bad}", err=True)
        sys.exit(2)
    verdict = "VALID" if playground.violation is None else f"INVALID ({playground.violation})"
    click.echo(
        f"--- playground seed={playground.seed} actions={len(playground.actions)} until={playground.now_us} us: {verdict}",
        err=True,
    )
    sys.exit(0 if playground.violation is None else 1)


def _replay_campaign(path_text: str, trace: str, *, shrink: bool) -> None:
    """Replay a schedule; when it fails, shrink it, write the shrunk one
    beside it and print the command and a regression-test stub. Exit 1
    when the anomaly reproduced (the run is invalid), 0 when it did not,
    2 for a file that is not a schedule."""
    from pathlib import Path

    from ._schedule import MAX_FILE_BYTES, ScheduleError, loads_schedule
    from ._schedule_replay import regression_test_stub, replay_schedule, shrink_schedule

    path = Path(path_text)
    file = path / "schedule.json" if path.is_dir() else path
    try:
        with open(file, "rb") as handle:
            schedule = loads_schedule(handle.read(MAX_FILE_BYTES + 1))
        click.echo(
            f"SCHEDULE {file}: {schedule.origin or 'no origin'}; seed {schedule.seed}, {len(schedule.faults)} faults,"
            f" {len(schedule.operations)} operations, {schedule.duration_ms} ms, check quorum {'on' if schedule.timers.check_quorum else 'off'}"
        )
        replay = replay_schedule(schedule, trace=None if trace == "none" else click.echo)
    except (OSError, ScheduleError) as bad:
        click.echo(f"error: {file} is not a schedule (docs/replay.md): {bad}", err=True)
        sys.exit(2)
    if replay.left_out:
        click.echo(f"    {replay.left_out} compare-and-set operations have no simulator form: left out")
    if replay.anomaly is None:
        click.echo(f"--- from-campaign: VALID: the anomaly did not reproduce in the simulator (ops: {replay.ops})")
        sys.exit(0)
    detail = replay.violation or f"{len(replay.stale_reads)} stale reads"
    click.echo(f"--- from-campaign: INVALID ({replay.anomaly}: {detail}): reproduced in the simulator")
    for example in replay.stale_reads[:3]:
        click.echo(f"    stale: {json.dumps(example, sort_keys=True)}")
    if not shrink:
        sys.exit(1)
    try:
        shrunk = shrink_schedule(schedule)
    except ScheduleError as error:  # it failed above: the simulator is deterministic
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    small = shrunk.schedule
    out = file.with_name(file.stem.removesuffix(".shrunk") + ".shrunk.json")
    out.write_text(small.dumps())
    click.echo(
        f"--- shrunk in {shrunk.runs} simulator runs: {len(small.faults)} faults (of {len(schedule.faults)}),"
        f" {len(small.operations)} operations (of {len(schedule.operations)}), {small.duration_ms} ms (of {schedule.duration_ms}); still {shrunk.anomaly}"
    )
    click.echo(f"    schedule: {out}")
    click.echo(f"    replay: jepsen-like sim --from-campaign {out} --no-shrink")
    click.echo(f"    on real processes: jepsen-like campaign --replay {out} --checker reference")
    click.echo("    regression test (paste into tests/sim/):")
    for line in regression_test_stub(small, shrunk.anomaly, "shrunk_schedule_still_fails").splitlines():
        click.echo(f"        {line}" if line else "")
    sys.exit(1)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


@click.command("sweep")
@click.option("--seeds", type=click.IntRange(min=1), default=1000, show_default=True, help="How many seeds.")
@click.option("--start", type=int, default=0, show_default=True, help="The first seed.")
@click.option("--scenario", type=click.Choice(sorted(SCENARIOS)), default="random", show_default=True)
@click.option("--check-quorum/--no-check-quorum", default=True)
@click.option("--pre-vote/--no-pre-vote", default=True)
@click.option("--json", "as_json", is_flag=True, help="End with a one-line JSON summary.")
@click.option(
    "--reconfigure",
    is_flag=True,
    help="random only: run just the seeds that draw the membership nemesis (dynamic voters, KIP-853), "
    "from --start on, until --seeds of them ran.",
)
@_BROKERS_OPTION
def sweep_command(
    seeds: int,
    start: int,
    scenario: str,
    check_quorum: bool,
    pre_vote: bool,
    as_json: bool,
    reconfigure: bool,
    brokers: int | None,
) -> None:
    """Run a scenario over many seeds and report failures and figures; the
    seeds whose runs changed voters are counted apart."""
    if reconfigure and scenario != "random":
        raise click.UsageError("--reconfigure: only the random scenario draws the membership nemesis")
    _set_brokers(default_options(scenario, start), scenario, brokers)  # refused before the first seed runs
    began = time.perf_counter()
    failures: list[str] = []
    resign_ms: list[float] = []
    failover_ms: list[float] = []
    # The scenario's own figures (ScenarioResult.extra), where it names them.
    figures: dict[str, list[float]] = {name: [] for name in getattr(SCENARIOS[scenario], "figures", ())}
    # Seeds whose options change voters (the membership nemesis), with
    # auto-join, and their failures.
    reconfigured = {"seeds": 0, "auto_join": 0, "failures": 0}
    for seed in _sweep_seeds(scenario, start, seeds, reconfigure):
        options = default_options(scenario, seed)
        if options.reconfigure:
            reconfigured["seeds"] += 1
            reconfigured["auto_join"] += options.auto_join
        options.check_quorum = check_quorum
        options.pre_vote = pre_vote
        _set_brokers(options, scenario, brokers)
        result = run_scenario(scenario, seed, options)
        if result.leader_resign_ms is not None:
            resign_ms.append(result.leader_resign_ms)
        if result.failover_ms is not None:
            failover_ms.append(result.failover_ms)
        for name, values in figures.items():
            value = result.extra.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.append(value)
        if not result.valid:
            reconfigured["failures"] += options.reconfigure
            first_line = (result.violation or "").splitlines()[0] if result.violation else ""
            failures.append(f"seed {seed}: {result.failure_class}: {first_line}")
            click.echo(f"FAIL seed={seed} {result.failure_class}: {first_line}")
            click.echo(f"     replay: {_replay_command(scenario, seed, check_quorum, pre_vote, brokers)}")
    elapsed_s = time.perf_counter() - began
    summary = {
        "scenario": scenario,
        "seeds": seeds,
        "brokers": brokers,
        "failures": len(failures),
        "seeds_per_s": round(seeds / elapsed_s, 1),
        "leader_resign_ms": _distribution(resign_ms),
        "failover_ms": _distribution(failover_ms),
        "reconfiguration_seeds": reconfigured["seeds"],
        "reconfiguration_auto_join_seeds": reconfigured["auto_join"],
        "reconfiguration_failures": reconfigured["failures"],
    }
    summary.update({name: _distribution(values) for name, values in figures.items()})
    click.echo(
        f"{scenario}: {seeds} seeds, {len(failures)} failures, {summary['seeds_per_s']} seeds/s;"
        f" resign {summary['leader_resign_ms']}; failover {summary['failover_ms']}"
    )
    if reconfigured["seeds"]:
        click.echo(
            f"    {reconfigured['seeds']} seeds with reconfiguration ({reconfigured['auto_join']} with auto-join),"
            f" {reconfigured['failures']} violations"
        )
    for name in figures:
        click.echo(f"    {name}: {summary[name]}")
    if as_json:
        click.echo(json.dumps(summary, sort_keys=True))
    sys.exit(1 if failures else 0)


def _sweep_seeds(scenario: str, start: int, count: int, reconfigure: bool) -> Iterator[int]:
    """``count`` seeds from ``start``; with ``reconfigure``, only those whose
    drawn options change voters (about three in ten)."""
    seed = start
    ran = 0
    while ran < count:
        if not reconfigure or default_options(scenario, seed).reconfigure:
            ran += 1
            yield seed
        seed += 1


def _distribution(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def quantile(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "n": len(ordered),
        "min": round(ordered[0], 1),
        "p50": quantile(0.5),
        "p99": quantile(0.99),
        "max": round(ordered[-1], 1),
        "mean": round(statistics.fmean(ordered), 1),
    }
