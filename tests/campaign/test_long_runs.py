"""Long campaigns without a long run: ``--duration``, the history streamed
to Parquet chunks, and the harness's memory held to a bound however many
events it records (issue 20, "Long runs"; docs/history.md)."""

from __future__ import annotations

import contextlib
import json
import random

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from jepsen_like.campaign import _history
from jepsen_like.campaign._history import HistoryRecorder
from jepsen_like.campaign._progress import elapsed_of_total
from jepsen_like.campaign._workloads import RETIRED_TOPICS_KEPT, ClientEndpoints, Workload, WorkloadOptions
from jepsen_like.campaign.cli import campaign_command, parse_duration
from jepsen_like.checker._load import discover_histories, read_history_events


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5h", 5400), ("45", 45)])
def test_a_duration_is_read_with_its_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2 hours", "h", "-5m", "0s", "49h", "1e3s"])
def test_a_duration_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--duration", "2x"], "is not a duration"),
        (["--duration", "30m", "--time-limit", "20"], "pick one"),
        # --time-limit was a bare float: nan, 0 and negative times went on
        # to start a cluster (found by hand).
        (["--time-limit", "nan"], "is not a duration"),
        (["--time-limit", "-5"], "is not a duration"),
        (["--time-limit", "0"], "a duration must be more than 0"),
    ],
)
def test_campaign_refuses_a_bad_duration_before_starting_anything(tmp_path, arguments, message):
    result = CliRunner().invoke(campaign_command, [*arguments, "--store", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "store").exists()


def test_the_progress_line_shows_elapsed_of_total_as_a_clock_for_long_runs():
    assert elapsed_of_total(12.0, 60.0).strip() == "12/60 s"
    assert elapsed_of_total(5400.0, 7200.0) == "1:30:00/2:00:00 (75%)"


def test_a_recorder_fed_many_events_keeps_bounded_tables_and_streams_every_event_to_parquet_chunks(tmp_path, monkeypatch):
    """8,000 events of 6 clients on 400 keys over a simulated quarter hour:
    nothing the recorder keeps grows with them, and the chunk directory
    reads back as the same history as the JSON lines."""
    monkeypatch.setattr(_history, "LAST_COMPLETIONS_KEPT", 100)
    monkeypatch.setattr(_history, "THROUGHPUT_WINDOW_MAX_S", 20)
    clients, events_max, chunk_events = 6, 8_000, 1_000
    sizes: list[tuple[int, int, int, int]] = []

    async def drive() -> HistoryRecorder:
        recorder = HistoryRecorder(tmp_path / "history.jsonl", parquet=tmp_path / "history.parquet", chunk_events=chunk_events)
        rng = random.Random(7)
        process = list(range(clients))
        next_process = clients
        value = 0
        while recorder.events < events_max:
            client = rng.randrange(clients)
            key = f"r{recorder.events // 20}"
            value += 1
            recorder.record(process[client], "invoke", "write", key, value, write_id=f"{key}={value}")
            trio.testing.MockClock.jump(clock, 0.12)
            outcome = rng.choice(["ok", "ok", "ok", "fail", "info"])
            recorder.record(process[client], outcome, "write", key, value, offset=value if outcome == "ok" else None)
            if outcome == "info":  # a fresh process, as the workload does
                process[client], next_process = next_process, next_process + 1
            if recorder.events % 397 == 0:
                recorder.nemesis("kill", {"phase": "start", "fault": {"node": 1}})
                sizes.append((len(recorder.last_completion), len(recorder.pending), len(recorder._ok_per_second), recorder.chunks.buffered))
                assert recorder.ops_per_second() >= 0
        recorder.close()
        return recorder

    clock = trio.testing.MockClock()
    recorder = trio.run(drive, clock=clock)
    assert sizes and max(size[0] for size in sizes) <= 100
    assert max(size[1] for size in sizes) <= clients
    assert max(size[2] for size in sizes) <= _history.THROUGHPUT_WINDOW_MAX_S + 1
    assert max(size[3] for size in sizes) < chunk_events
    chunks = sorted((tmp_path / "history.parquet").iterdir())
    assert [path.name for path in chunks[:2]] == ["part-00000.parquet", "part-00001.parquet"]
    assert len(chunks) == -(-recorder.events // chunk_events)
    assert not (tmp_path / "history.parquet.partial").exists()
    [from_lines] = discover_histories([tmp_path / "history.jsonl"])
    [from_chunks] = discover_histories([tmp_path / "history.parquet"])
    lines, parquet = read_history_events(from_lines), read_history_events(from_chunks)
    assert len(parquet) == recorder.events
    assert parquet == lines


def test_a_chunk_is_written_after_chunk_seconds_even_when_few_events_come(tmp_path, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(_history.time, "monotonic", lambda: now[0])
    chunks = _history.ParquetChunks(tmp_path / "history.parquet", chunk_events=1000, chunk_seconds=30)
    chunks.add({"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "read", "key": "r0", "value": None})
    assert chunks.chunks_written == 0
    now[0] += 31
    chunks.add({"index": 1, "time": 1, "process": 0, "type": "ok", "f": "read", "key": "r0", "value": 3, "mode": "linearizable"})
    assert (chunks.chunks_written, chunks.buffered) == (1, 0)
    chunks.finish()
    assert [path.name for path in (tmp_path / "history.parquet").iterdir()] == ["part-00000.parquet"]


def _endpoints(index: int) -> ClientEndpoints:
    return ClientEndpoints(["1@127.0.0.1:9"], {101: ("127.0.0.1", 9)}, contextlib.nullcontext)


def test_the_workload_s_tables_stay_bounded_and_it_still_knows_every_key_it_touched():
    """The keys are picked as a long run picks them (100,000 operations,
    thousands of keys retired); the workload's own tables do not grow, and
    the keys its final reads visit are exactly the keys touched."""
    workload = Workload(None, _endpoints, WorkloadOptions(), cluster_id="c", rng=random.Random(3))  # type: ignore[arg-type]
    touched: set[str] = set()
    remembered = []
    for step in range(100_000):
        kind = step % 3
        if kind == 0:
            key = workload._pick_register_key()
            workload._wrote(key, step)
            touched.add(key)
        elif kind == 1:
            touched.add(f"topic/{workload._pick_topic()}")
        else:
            touched.add(f"broker/{workload._pick_synthetic_broker()}")
        if step % 1000 == 0:
            remembered.append(workload.remembered())
    assert len(touched) > 2000
    # Counts of the live keys, last writes of the live register keys, the
    # live and the kept retired topics' descriptors, the retired names.
    options = WorkloadOptions()
    live = options.keys_live + options.topics_live + options.synthetic_brokers_live
    bound = live + options.keys_live + (options.topics_live + RETIRED_TOPICS_KEPT) + RETIRED_TOPICS_KEPT
    assert max(remembered) <= bound
    assert remembered[-1] >= bound - 10  # it filled up, then stopped growing
    keys = workload.touched_keys()
    assert set(keys) == touched and len(keys) == len(touched)


def test_the_report_of_a_long_history_draws_a_sample_and_counts_every_operation(tmp_path):
    from jepsen_like.report import _load

    lines = []
    for op in range(1000):
        lines.append({"index": 2 * op, "time": 10 * op, "process": op % 4, "type": "invoke", "f": "read", "key": "r0", "value": None})
        lines.append({"index": 2 * op + 1, "time": 10 * op + 5, "process": op % 4, "type": "ok" if op % 10 else "fail", "f": "read", "key": "r0", "value": 1})
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = _load.RunData(run_dir=tmp_path)
    _load._read_history(path, data, ops_kept_max=100)
    assert len(data.ops) <= 100
    assert data.ops_sampled_every == 16
    assert data.outcome_totals == {"ok": 900, "fail": 100}
    assert [op.index for op in data.ops] == sorted(op.index for op in data.ops)
    assert any("draw one in 16" in warning for warning in data.warnings)


def test_the_harness_keeps_a_few_synthetic_brokers_certificates_loaded_however_many_register(tmp_path):
    """A long run registers a new synthetic broker every few seconds, each
    over TLS with its own certificate. The harness once kept every one's
    TlsConfig (two OpenSSL contexts, about 0.85 MiB that tracemalloc does
    not see): 1,959 MiB after 30 minutes. Only the most recent stay loaded;
    one that comes back is loaded again from its files. (Three loads only:
    each takes a real TlsConfig, 0.1 to 1 s.)"""
    from jepsen_like.campaign._cluster import BrokerCertificates
    from quorum.runtime import create_cluster_certificates

    create_cluster_certificates(tmp_path, nodes=[1], clients=[])
    certificates = BrokerCertificates(tmp_path, kept=1)
    first = certificates.config(1001)
    assert (first.principal.name, len(certificates)) == ("1001", 1)
    second = certificates.config(1002)
    assert (second.principal.name, len(certificates)) == ("1002", 1)
    assert certificates.config(1002) is second  # the most recent stays loaded
    again = certificates.config(1001)  # issued once, loaded again from its files
    assert again is not first and again.principal.name == "1001" and len(certificates) == 1
    assert sorted(path.name for path in tmp_path.glob("broker-*-key.pem")) == ["broker-1001-key.pem", "broker-1002-key.pem"]
    # Nor does any hold a session ticket: reading one leaks OpenSSL memory
    # on every connection (see member_tls_config).
    assert not again.session_resumption and not second.session_resumption


def _run_history(path, events):
    path.write_text("".join(json.dumps({"index": index, **event}) + "\n" for index, event in enumerate(events)))
    return path


def test_a_long_run_writes_the_schedule_of_its_first_part_which_its_loader_accepts(tmp_path):
    """A 30-minute chaos run wrote 215,179 register operations into
    schedule.json, which its own loader refuses (100,000 at most). The
    schedule now holds what began before the first operation that did not
    fit: loadable, replayable, and saying where it ends."""
    from jepsen_like.campaign import CampaignOptions
    from jepsen_like.campaign._replay import schedule_of_run
    from jepsen_like.sim import MAX_FAULTS, MAX_OPERATIONS, Fault, loads_schedule

    assert schedule_of_run.__kwdefaults__ == {"operations_max": MAX_OPERATIONS, "faults_max": MAX_FAULTS}
    start_ns = 1_000_000_000
    ms = lambda t: start_ns + t * 1_000_000  # noqa: E731
    kill = lambda node, phase, t: {"process": "nemesis", "type": "info", "f": "kill", "key": None, "value": {"phase": phase, "fault": {"node": node}}, "time": ms(t)}  # noqa: E731
    events = [kill(1, "start", 50), kill(1, "end", 900)]
    for op in range(40):  # one every 100 ms, on two clients
        process, t = op % 2, 100 * op
        events.append({"process": process, "type": "invoke", "f": "write", "key": "r0", "value": op, "time": ms(t)})
        if op == 24:
            events.append(kill(2, "start", t + 10))  # begins inside the window, ends after it
        if op == 26:
            events.append(kill(3, "start", t + 10))  # begins after it: left out with its end
        events.append({"process": process, "type": "ok" if op % 7 else "info", "f": "write", "key": "r0", "value": op, "node": "2", "time": ms(t + 60)})
        if op % 7 == 0:
            events[-1]["node"] = None
    events += [kill(2, "end", 4500), kill(3, "end", 4600)]
    history = _run_history(tmp_path / "history.jsonl", events)
    options = CampaignOptions(scenario="chaos", controllers=3, seed=5, time_limit_s=4)
    schedule = schedule_of_run(history, options, leader=1, start_ns=start_ns, origin="campaign chaos seed 5 (RUN)", operations_max=25)
    assert [op.at_ms for op in schedule.operations] == [100 * op for op in range(25)]
    assert schedule.faults == (Fault(50, 850, "kill", 1), Fault(2410, 4500 - 2410, "kill", 2))
    assert schedule.duration_ms == 4500 and schedule.not_replayable == ()
    assert schedule.origin == "campaign chaos seed 5 (RUN) (its first 2.5 s: 25 operations at most)"
    assert loads_schedule(schedule.dumps()) == schedule
    # Faults fill a window too; and a schedule lasts an hour at most.
    by_faults = schedule_of_run(history, options, leader=1, start_ns=start_ns, origin="o", faults_max=2)
    assert len(by_faults.faults) == 2 and by_faults.origin == "o (its first 2.6 s: 2 faults at most)"
    assert [op.at_ms for op in by_faults.operations] == [100 * op for op in range(27)]
    hour_ms = 3_600_000
    late = [{**event, "time": event["time"] + (hour_ms - 2_000) * 1_000_000} for event in events]
    long = schedule_of_run(_run_history(tmp_path / "late.jsonl", late), options, leader=1, start_ns=start_ns, origin="o")
    assert long.duration_ms == hour_ms and max(op.at_ms for op in long.operations) < hour_ms
    assert long.origin.endswith("(its first 3,600.0 s: an hour at most)") and loads_schedule(long.dumps()) == long


@pytest.mark.parametrize(
    ("valid", "checked", "checker_error", "status"),
    [
        (True, True, None, 0),
        (False, True, None, 1),
        ("unknown", True, None, 1),
        (None, True, "Spark did not start", 1),
        (None, False, None, 0),  # --no-check: recorded, as asked
    ],
)
def test_a_campaign_exits_0_for_a_valid_history_or_a_recording_asked_for(valid, checked, checker_error, status):
    """``--no-check`` exited 1 ("NOT CHECKED") after recording exactly what
    was asked, so ``campaign --no-check && check ...`` never checked."""
    from pathlib import Path

    from jepsen_like.campaign._runner import CampaignResult
    from jepsen_like.campaign.cli import campaign_exit_status

    result = CampaignResult(run_dir=Path("run"), valid=valid, ops={}, faults=0, checker_error=checker_error)
    assert campaign_exit_status(result, checked=checked) == status
