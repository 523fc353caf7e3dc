"""``jepsen-like check`` and ``jepsen-like synth``.

Exit codes of ``check``: 0 every history valid; 1 some history invalid;
3 none invalid but some unknown (a key ran out of its budget, or the
deadline passed before a check decided); 4 none invalid or
unknown, but some history had nothing to check (no client operations, node
events or log dumps); 2 bad usage or malformed input.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from jepsen_like.checker._edn import parse_value
from jepsen_like.checker._errors import HistoryFormatError
from jepsen_like.checker._load import HISTORY_FORMATS, discover_histories, is_small_input
from jepsen_like.checker._model_catalog import MODEL_DEFAULT, MODEL_NAMES, get_model
from jepsen_like.checker._wgl import DEFAULT_BUDGET_MS, DEFAULT_BUDGET_STATES, DEFAULT_BUDGET_STEPS, KeyBudget

INPUT_ERROR_EXIT_CODE = 2


class _InputError(click.ClickException):
    exit_code = INPUT_ERROR_EXIT_CODE


def _not_nan(seconds: float | None) -> float | None:
    # FloatRange lets "nan" through (no comparison with it is true); "inf"
    # is no deadline, and stays.
    if seconds is not None and seconds != seconds:
        raise click.BadParameter("must be a number of seconds, got nan")
    return seconds


def _parse_conf(items: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--spark-conf")
        conf[name.strip()] = value.strip()
    return conf


@click.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--model", type=click.Choice(MODEL_NAMES), default=None,
              help="Model for every history (default: each history's meta.json; else kv if it has get/put/append; else register).")
@click.option("--initial-value", metavar="EDN", default=None,
              help="The model's initial state for every history, as an EDN value: nil, 0, \"a\", {:x 0} (default: the model's own).")
@click.option("--format", "history_format", type=click.Choice(HISTORY_FORMATS), default=None,
              help="Read the history files named on the command line as this format, whatever their extension.")
@click.option("--spark-master", default="local[*]", show_default=True, help="Any Spark master URL, e.g. spark://host:7077.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Results: a file for one history, a directory of <history name>.json for several.")
@click.option("--independent", is_flag=True,
              help="Values are Jepsen's independent [key value] tuples (jepsen.independent): each key is checked "
                   "as its own object (as \"independent\": true in a history's meta says).")
@click.option("--key-budget-steps", "--budget-steps", "budget_steps", type=click.IntRange(min=1),
              default=DEFAULT_BUDGET_STEPS, show_default=True,
              help="Search steps per key for the linearizability search (about 1.5 million a second); "
                   "past it the key is unknown. Steps, not seconds: verdicts do not depend on machine load.")
@click.option("--key-budget-states", "budget_states", type=click.IntRange(min=1), default=DEFAULT_BUDGET_STATES,
              show_default=True,
              help="Explored states per key (memo cache entries, about 200 bytes each); past it the key is unknown. "
                   "A count, as steps are.")
@click.option("--key-budget-ms", "budget_ms", type=click.IntRange(min=1), default=DEFAULT_BUDGET_MS, show_default=True,
              help="Wall-clock milliseconds per key: a safety net past the two counts (depends on the machine).")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              callback=lambda _context, _parameter, value: _not_nan(value),
              help="Seconds for the whole check: when they pass, what is not yet decided is unknown (reason "
                   "deadline), the Spark job is cancelled and the results are written.")
@click.option("--max-witnesses", type=click.IntRange(min=0), default=20, show_default=True,
              help="Witnesses kept per check (counts are always exact).")
@click.option("--all-keys", is_flag=True, help="Search every key, even in histories already refuted by one.")
@click.option("--skip-linearizability", is_flag=True, help="Run tier 1 only.")
@click.option("--reference", is_flag=True, help="Use the pure-Python reference checker instead of Spark (little histories only).")
@click.option("--spark-conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark configuration (repeatable).")
@click.option("--spark-log", type=click.Path(path_type=Path), default=None,
              help="File Spark's own output is appended to (default: spark.log beside --out, else "
                   "jepsen-like-check-spark.log in the temporary directory).")
def check_command(
    paths: tuple[str, ...],
    model: str | None,
    initial_value: str | None,
    history_format: str | None,
    spark_master: str,
    out: Path | None,
    independent: bool,
    budget_steps: int,
    budget_states: int,
    budget_ms: int,
    deadline_s: float | None,
    max_witnesses: int,
    all_keys: bool,
    skip_linearizability: bool,
    reference: bool,
    spark_conf: tuple[str, ...],
    spark_log: Path | None,
) -> None:
    """Check histories (files, directories of them, campaign directories)."""
    from jepsen_like.checker._report import exit_code, print_summary, write_results

    started = time.monotonic()
    conf = _parse_conf(spark_conf)
    initial: Any = MODEL_DEFAULT
    if initial_value is not None:
        try:
            initial = parse_value(initial_value)
            if model is not None:
                get_model(model, initial)
        except (ValueError, HistoryFormatError) as error:
            raise click.BadParameter(str(error), param_hint="--initial-value") from None
    try:
        if reference:
            from jepsen_like.checker._reference import check_reference

            limits = KeyBudget(budget_steps, budget_states, budget_ms, None if deadline_s is None else time.time() + deadline_s)
            results = check_reference(
                list(paths), model=model, max_witnesses=max_witnesses, initial_value=initial, history_format=history_format,
                limits=limits, independent=independent,
            )
        else:
            from jepsen_like.checker._spark import SessionStart, SparkStartError

            if spark_log is None and out is not None:
                spark_log = (out if out.is_dir() else out.parent) / "spark.log"
            if spark_log is not None:
                try:
                    spark_log.parent.mkdir(parents=True, exist_ok=True)
                    spark_log.open("a").close()
                except OSError as error:
                    raise _InputError(f"cannot write the Spark log {spark_log}: {error}") from None
            # The JVM starts first (seconds), on a thread of its own, while
            # this thread imports the job (pyspark.sql, pyarrow, the checker).
            small = is_small_input(discover_histories(list(paths), history_format=history_format, independent=independent))
            # This process checks once and exits: the Java objects of its
            # queries go with the JVM, not one round trip each.
            starting = SessionStart(spark_master, conf=conf, log_path=spark_log, small_input=small, one_check=True)
            try:
                from jepsen_like.checker._job import check

                results = check(
                    list(paths), model=model, budget_steps=budget_steps,
                    budget_states=budget_states, budget_ms=budget_ms, independent=independent,
                    # The deadline counts from the command's start, imports included.
                    deadline_s=None if deadline_s is None else max(1e-3, deadline_s - (time.monotonic() - started)),
                    max_witnesses=max_witnesses, all_keys=all_keys, linearizability=not skip_linearizability,
                    spark=starting, initial_value=initial, history_format=history_format,
                )
            except SparkStartError as error:  # a master, option or setting of the user's refused
                raise _InputError(str(error)) from None
            finally:
                # Until the session has started, this process's output goes
                # to the Spark log: nothing may be printed before.
                starting.wait()
    except HistoryFormatError as error:
        raise _InputError(str(error)) from None
    if out is not None:
        try:
            written = write_results(results, out)
        except OSError as error:
            raise _InputError(f"cannot write results to {out}: {error}") from None
        click.echo(f"results: {written[0] if len(written) == 1 else out}", err=True)
    print_summary(results, seconds=time.monotonic() - started)
    click.get_current_context().exit(exit_code(results))


def _list_kinds(context: click.Context, _parameter: click.Parameter, value: bool) -> None:
    if not value or context.resilient_parsing:
        return
    from jepsen_like.checker._synth import ANOMALY_KINDS

    for kind, description in ANOMALY_KINDS.items():
        click.echo(f"{kind:26} -> {description.check}: {description.description}")
    context.exit(0)


@click.command("synth")
@click.option("--ops", type=click.IntRange(min=1), required=True, help="Base operations.")
@click.option("--keys", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--plant", default="", metavar="KIND:COUNT,...", help="Anomalies to plant (see --list-kinds).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--processes", type=click.IntRange(min=1), default=10, show_default=True, help="Concurrent client processes.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("synth-out"), show_default=True,
              help="Campaign directory to write.")
@click.option("--format", "history_format", type=click.Choice(["jsonl", "parquet", "both"]), default="jsonl", show_default=True)
@click.option("--side-format", type=click.Choice(["jsonl", "parquet"]), default="jsonl", show_default=True,
              help="Format of node-events and log-dumps.")
@click.option("--list-kinds", is_flag=True, is_eager=True, expose_value=False, callback=_list_kinds,
              help="List the anomaly kinds and exit.")
def synth_command(
    ops: int, keys: int, plant: str, seed: int, processes: int, out: Path, history_format: str, side_format: str,
) -> None:
    """Write a synthetic campaign directory, with planted anomalies."""
    from jepsen_like.checker._synth import parse_plant_spec, synthesize

    try:
        counts = parse_plant_spec(plant)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--plant") from None
    result = synthesize(
        out, ops=ops, keys=keys, plant=counts, seed=seed, processes=processes,
        history_format=history_format, side_format=side_format,
    )
    click.echo(
        json.dumps(
            {
                "directory": str(result.directory),
                "operations": result.operations,
                "events": result.events,
                "planted": [{"kind": a.kind, "check": a.check, "witness": dict(a.witness)} for a in result.planted],
            },
            indent=1,
        )
    )


@click.group()
def main() -> None:
    """The history checker (also available as ``jepsen-like check``/``synth``)."""


main.add_command(check_command)
main.add_command(synth_command)
