"""The checker on a Spark standalone cluster (bench/spark_standalone.py,
``make checker-standalone``): the real cluster in make soak; its command
line and the stopping of exactly the processes it started in make test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.spark_standalone import Daemons, main, parse_arguments

REPO = Path(__file__).resolve().parents[2]

WRITE_READ = [
    {"index": 0, "process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1, "time": 0},
    {"index": 1, "process": 0, "type": "ok", "f": "write", "key": "x", "value": 1, "time": 1000},
    {"index": 2, "process": 1, "type": "invoke", "f": "read", "key": "x", "value": None, "time": 2000},
    {"index": 3, "process": 1, "type": "ok", "f": "read", "key": "x", "value": 2, "time": 3000},
]


def test_arguments_need_a_history_or_a_size_and_keep_what_follows_the_separator_for_the_check(capsys):
    with pytest.raises(SystemExit):
        parse_arguments([])
    assert "--ops N" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_arguments(["--ops", "0"])
    with pytest.raises(SystemExit):
        parse_arguments(["--ops", "10", "--workers", "0"])
    parsed = parse_arguments(["a.jsonl", "--workers", "3", "--", "--model", "register", "--out", "x.json"])
    assert (parsed.paths, parsed.workers, parsed.extra) == (["a.jsonl"], 3, ["--model", "register", "--out", "x.json"])


def test_stopping_ends_exactly_the_started_processes_and_kills_one_that_ignores_sigterm(tmp_path):
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    daemons = Daemons(stop_timeout_s=1.0)
    try:
        polite = daemons.start("polite", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "a.log", dict(os.environ))
        stubborn = daemons.start(
            "stubborn",
            [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(60)"],
            tmp_path / "b.log", dict(os.environ),
        )
        deadline = time.monotonic() + 60
        while "ready" not in (tmp_path / "b.log").read_text():  # its SIGTERM handler is in place once it says so
            assert time.monotonic() < deadline, "the stubborn process never started"
            time.sleep(0.02)
        daemons.stop_all()
        assert polite.process.returncode == -15  # SIGTERM
        assert stubborn.process.returncode == -9  # SIGKILL, after the timeout
        assert outsider.poll() is None  # not started by it: left alone
    finally:
        outsider.kill()
        outsider.wait()


def test_a_spark_home_whose_master_cannot_start_is_reported_with_its_log(tmp_path, capsys):
    broken = tmp_path / "spark"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "spark-class").write_text("#!/bin/sh\necho 'no Spark here' >&2\nexit 3\n")
    (broken / "bin" / "spark-class").chmod(0o755)
    history = tmp_path / "h.jsonl"
    history.write_text("".join(json.dumps(event) + "\n" for event in WRITE_READ))
    work = tmp_path / "work"
    assert main([str(history), "--work-dir", str(work), "--spark-home", str(broken)]) == 5
    error = capsys.readouterr().err
    assert "exited with code 3" in error and "no Spark here" in error
    assert not work.exists()  # it made it: deleted (unless --keep)


@pytest.mark.long  # three JVMs for the cluster and one for the check: minutes, or tens at load 45: make soak
@pytest.mark.spark
def test_the_checker_runs_on_a_standalone_cluster_and_finds_what_local_mode_finds(tmp_path):
    history = tmp_path / "h.jsonl"
    history.write_text("".join(json.dumps(event) + "\n" for event in WRITE_READ))
    out = tmp_path / "result.json"
    script = subprocess.Popen(
        [sys.executable, "-m", "bench.spark_standalone", str(history), "--worker-memory", "1g", "--driver-memory", "1g",
         "--work-dir", str(tmp_path / "cluster"), "--", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        # Four JVMs: over 15 minutes at load average 45 on 2 cores.
        stdout, stderr = script.communicate(timeout=1800)
    except subprocess.TimeoutExpired:
        script.terminate()  # SIGTERM: the script stops its cluster on the way out
        stdout, stderr = script.communicate(timeout=120)
    run = subprocess.CompletedProcess(script.args, script.returncode, stdout, stderr)
    assert run.returncode == 1, run.stdout + run.stderr  # the read of 2 was never written
    assert "cluster up: spark://127.0.0.1:" in run.stdout
    result = json.loads(out.read_text())
    assert result["checker"] == "spark" and result["valid"] is False
    assert result["checks"]["garbage-read"]["status"] == "fail"
    # Both workers' executors ran (the master gave the app both cores).
    [memory] = [line for line in run.stdout.splitlines() if line.startswith("peak RSS MB: ")]
    roles = json.loads(memory[len("peak RSS MB: "):])
    assert sum(1 for name in roles if name.startswith("Master ")) == 1
    assert sum(1 for name in roles if name.startswith("Worker ")) == 2
    assert sum(1 for name in roles if name.startswith("CoarseGrainedExecutorBackend ")) == 2
    # Every process it started is gone.
    for name in roles:
        pid = int(name.rsplit("pid ", 1)[1].rstrip(")"))
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
