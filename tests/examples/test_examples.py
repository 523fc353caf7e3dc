"""The embedding examples run as scripts and print what docs/embedding.md
says they print. (examples/partition_leader_service.py is run by
tests/broker_agent/test_example.py.)"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.processes


def run_example(name: str, *args: str, timeout_s: float = 60, returncode: int = 0) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout_s
    )
    assert result.returncode == returncode, f"{name} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def free_voters(count: int) -> str:
    """``1@127.0.0.1:PORT,...`` with ports the OS says are free now."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    voters = ",".join(f"{node_id}@127.0.0.1:{sock.getsockname()[1]}" for node_id, sock in enumerate(sockets, 1))
    for sock in sockets:
        sock.close()
    return voters


def test_every_example_is_run_by_a_test():
    """A new file in examples/ needs a test here (or in
    tests/broker_agent/test_example.py) that runs it."""
    here = Path(__file__).read_text()
    broker_test = (EXAMPLES.parent / "tests" / "broker_agent" / "test_example.py").read_text()
    run = set(re.findall(r'run_example\("(\w+\.py)"', here)) | set(re.findall(r'"examples" / "(\w+\.py)"', broker_test))
    examples = {path.name for path in EXAMPLES.glob("*.py")}
    assert examples, EXAMPLES
    assert not examples - run, f"examples no test runs: {sorted(examples - run)}"


def test_replicated_counter_adds_from_any_node_and_reads_linearizably():
    out = run_example("replicated_counter.py", free_voters(3))
    assert out.splitlines() == ["node 3 adds 5, total 5", "node 1 adds 2, total 7", "node 2 reads 7"]


def test_replicated_dict_forwards_refuses_contains_and_restarts():
    out = run_example("replicated_dict.py", free_voters(3))
    lines = out.splitlines()
    assert lines[:5] == [
        "compare_and_set blue -> green: True",
        "compare_and_set blue -> red: False",
        "pop of a missing key failed on every replica alike: KeyError: 'size'",
        "a set cannot be encoded: TypeError in the caller, nothing proposed",
        "linearizable read on a follower: green",
    ]
    assert re.fullmatch(r"with forward=False a follower refuses: NotLeaderError, leader hint [123]", lines[5])
    assert lines[6:] == ["follower read after its restart: green 3"]


def test_single_voter_quorum_commits_reads_snapshots_and_recovers():
    out = run_example("single_voter_quorum.py", "--transfers", "60")
    assert "leader: 1" in out
    # The ledger's answers come back to the proposer: alice and bob run dry.
    refused = int(re.search(r"60 transfers committed, (\d+) refused", out).group(1))
    assert 0 < refused < 60
    linearizable = re.search(r"linearizable read at offset (\d+): (\{.*\})", out)
    assert int(linearizable.group(1)) == 63  # two deposits, 60 transfers, the leader's epoch record
    assert "leader-local read at offset 63: total 120" in out  # transfers never create money
    # Snapshots every 25 records, 5 kept behind: the log no longer starts at 0.
    stats = re.search(r"log_start_offset=(\d+), log_end_offset=(\d+)", out)
    assert 0 < int(stats.group(1)) < int(stats.group(2)) == 63
    reopened = re.search(r"reopened: epoch (\d+), log (\d+)\.\.(\d+), (\d+) records replayed", out)
    assert int(reopened.group(1)) == 2  # a restarted leader never leads its old epoch again
    assert 0 < int(reopened.group(4)) < 63  # from the snapshot on, not the whole log
    assert f"balances after restart match: {linearizable.group(2)}" in out


def test_three_voter_quorum_elects_redirects_fails_over_and_catches_up():
    out = run_example("three_voter_quorum.py", "--writes", "20")
    first_leader = int(re.search(r"node (\d) leads epoch 1 after", out).group(1))
    assert "20 writes committed; high watermark 21" in out
    assert re.search(rf"a write to follower \d: NotLeaderError, leader hint {first_leader}", out)
    assert "linearizable read on the leader at offset 21: color=blue-19 (written at offset 20)" in out
    assert len(re.findall(r"  voter \d: log end offset \d+", out)) == 3
    handover = re.search(rf"node {first_leader} stopped; node (\d) leads epoch (\d+) after", out)
    assert handover and int(handover.group(1)) != first_leader and int(handover.group(2)) >= 2
    assert re.search(rf"node {first_leader} restarted as follower of epoch \d+, caught up: color=green", out)
    client = re.search(r"a client bootstrapped at follower (\d) wrote at offset (\d+) \(answered by node (\d)\); read back: color=purple \(offset (\d+)\)", out)
    assert client and client.group(1) != client.group(3) == handover.group(1)  # the follower sent it on to the leader
    assert client.group(2) == client.group(4)


def test_bank_ledger_campaign_finds_the_overdraft_bug_with_its_witness():
    """The ledger without its balance check, three node processes, no
    faults: the search finds a transfer that no order of the history makes
    legal (issue 20, item 5; the campaign with faults runs in
    tests/examples/test_bank_ledger.py)."""
    arguments = ("--buggy", "--seconds", "2", "--checker", "search", "--nemeses", "")
    out = run_example("bank_ledger.py", *arguments, timeout_s=120, returncode=1)
    lines = out.splitlines()
    assert re.fullmatch(r"\d+ ok, 0 fail, 0 info; 0 faults", lines[0]), out
    # The overdraft itself, or a read that saw a balance below zero.
    assert re.fullmatch(r"not linearizable at: (transfer \['\w+', '\w+', \d+\]|read None) -> ok", lines[1]), out
    assert lines[-1] == "valid: False", out
