"""A campaign killed with SIGKILL leaves no node running: its orphan guard
(jepsen_like/campaign/_orphan_guard.py) kills the node process groups the
harness did not stop. Real processes; every wait is on a condition, bounded."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jepsen_like.campaign._orphan_guard import OrphanGuard, groups_left
from jepsen_like.campaign._processes import NodeProcess, ProcessGroup

# Far longer than any of these tests waits: only the guard ends it.
NODE = [sys.executable, "-c", "import time; time.sleep(600)"]
WAIT_S = 30.0


def _alive(pid: int) -> bool:
    """Running or stopped; a zombie (dead, not yet reaped by whoever
    adopted it) is not alive."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:.0f} s: {what}"
        time.sleep(0.05)


def _kill_if_alive(pid: int) -> None:
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)


def test_the_messages_leave_the_groups_started_and_not_reaped():
    lines = ["+101\n", "+102\n", "-101\n", "+103\n", "+102\n", "-999\n"]
    assert groups_left(lines) == [102, 103]
    # Nothing malformed is acted on; init's group and 0 never.
    assert groups_left(["+\n", "+x\n", "101\n", "+-5\n", "+1\n", "+0\n", "+ 7\n", "", "+8"]) == [8]


@pytest.mark.processes
def test_the_nodes_of_a_campaign_killed_with_sigkill_are_killed_too(tmp_path):
    harness_code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from jepsen_like.campaign._processes import NodeProcess, ProcessGroup
        group = ProcessGroup()
        for node_id in (1, 2):
            group.add(NodeProcess(node_id, "controller", lambda: {NODE!r}, Path({str(tmp_path)!r}) / f"node{{node_id}}.log"))
            group.nodes[node_id].start()
        group.nodes[2].pause()  # a paused node is killed too
        print(*[node.process.pid for node in group.nodes.values()], group.guard.watchdog_pid, flush=True)
        time.sleep(600)
        """
    )
    harness = subprocess.Popen([sys.executable, "-c", harness_code], stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        *node_pids, watchdog_pid = map(int, harness.stdout.readline().split())
        pids = [*node_pids, watchdog_pid]
        assert len(node_pids) == 2 and all(_alive(pid) for pid in pids)
        harness.kill()  # SIGKILL: the harness runs no code of its own
        harness.wait(timeout=WAIT_S)
        _wait_until(lambda: not any(_alive(pid) for pid in pids), "the nodes and the watchdog are gone")
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait()
        for pid in pids:
            _kill_if_alive(pid)


@pytest.mark.processes
def test_a_campaign_that_stops_its_nodes_leaves_the_watchdog_nothing_to_kill(tmp_path, capfd):
    group = ProcessGroup()
    node = group.add(NodeProcess(1, "controller", lambda: NODE, tmp_path / "node1.log"))
    node.start()
    first_pid = node.process.pid
    node.kill()  # a kill -9 fault, then a restart: the old group is forgotten
    node.start()
    second_pid = node.process.pid
    watchdog = group.guard._watchdog
    try:
        assert watchdog is not None and watchdog.poll() is None
        group.stop_all()
        assert watchdog.returncode == 0  # close() waited for its exit
        assert "orphan guard" not in capfd.readouterr().err  # it killed nothing
        assert not _alive(first_pid) and not _alive(second_pid)
        assert group.guard.watchdog_pid is None
        # A node started after stop_all gets a new watchdog.
        node.start()
        assert group.guard.watchdog_pid not in (None, watchdog.pid)
    finally:
        group.stop_all()


class _RecordingGuard(OrphanGuard):
    """The real guard (its watchdog runs), noting each message and whether
    the group's leader was still unreaped when told it had ended."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[tuple[str, int, bool]] = []

    def track(self, pgid: int) -> None:
        self.messages.append(("+", pgid, True))
        super().track(pgid)

    def forget(self, pgid: int) -> None:
        self.messages.append(("-", pgid, _unreaped(pgid)))
        super().forget(pgid)


def _unreaped(pid: int) -> bool:
    """Our child ``pid`` still holds its pid: alive, or a zombie not yet
    reaped (so the pid cannot have been reused)."""
    return Path(f"/proc/{pid}").exists()


@pytest.mark.processes
def test_a_node_that_exits_by_itself_is_forgotten_once_and_before_it_is_reaped(tmp_path, monkeypatch):
    # The window the last change left: a node that ended by itself was
    # reaped by `running` and forgotten only at the next start or stop; a
    # harness killed in between left the watchdog a pid that could be
    # anybody's by then.
    guard = _RecordingGuard()
    group = ProcessGroup()
    group.guard = guard
    node = group.add(NodeProcess(1, "controller", lambda: [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "n.log"))
    try:
        node.start()
        first_pid = node.process.pid
        _wait_until(lambda: not node.running, "the node to exit by itself")
        assert node.process.returncode == 3  # `running` reaped it...
        assert guard.messages == [("+", first_pid, True), ("-", first_pid, True)]  # ...after telling the guard
        # Nothing is said twice, nor signalled once reaped (the pid may be
        # another process's): not by `running`, a kill or a restart.
        signalled = []
        monkeypatch.setattr(os, "kill", lambda pid, signum: signalled.append((pid, signum)))
        assert not node.running
        node.kill()
        monkeypatch.undo()
        assert signalled == []
        node.argv = lambda: NODE
        node.start()
        second_pid = node.process.pid
        assert guard.messages[2:] == [("+", second_pid, True)]
        node.terminate(timeout_s=WAIT_S)  # SIGTERM ends it: forgotten before its reap, once
        assert guard.messages[3:] == [("-", second_pid, True)]
    finally:
        group.stop_all()
