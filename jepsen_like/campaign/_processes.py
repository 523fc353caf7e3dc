"""Node processes of a campaign: start, kill -9, pause, resume, restart,
SIGTERM, each bounded in time, none left behind."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from jepsen_like.campaign._orphan_guard import OrphanGuard

logger = logging.getLogger("pykraft.campaign")

# How often a bounded wait for a node's exit looks again.
_EXIT_POLL_S = 0.02


def _has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it
    (``WNOWAIT``): until it is reaped its pid cannot be reused, so the
    orphan guard can be told first (see ``NodeProcess._forget``)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already, by someone else
        return True


@dataclass(slots=True)
class NodeProcess:
    """One node: how to start it, and the live process if any."""

    node_id: int
    role: str  # "controller" | "broker"
    argv: Callable[[], list[str]]
    log_path: Path
    process: subprocess.Popen | None = None
    paused: bool = False
    starts: int = 0
    pids: list[int] = field(default_factory=list)
    # Kills this node's process group if the harness is killed (set by
    # ProcessGroup.add).
    guard: OrphanGuard | None = None
    # The group the guard was told of and not yet told has ended: told
    # once, so that a later word about a reused pid cannot untrack another
    # node's group.
    guarded_pgid: int | None = None

    @property
    def running(self) -> bool:
        """Whether the process is alive (or paused). One that exited by
        itself is reaped here, after the guard is told."""
        if self.process is None or self.process.returncode is not None:
            return False
        if not _has_exited(self.process.pid):
            return True
        self._forget()
        self.process.poll()
        return False

    def start(self) -> None:
        if self.running:  # (one that ended by itself is reaped and forgotten here)
            return
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start #{self.starts + 1}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1
        self.paused = False
        self.pids.append(self.process.pid)
        if self.guard is not None:
            self.guard.track(self.process.pid)
            self.guarded_pgid = self.process.pid

    def kill(self) -> None:
        """kill -9: no shutdown, no flush."""
        if self.process is None:
            return
        if self.paused:
            self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)
        self._reap()

    def terminate(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.process is None:
            return
        if self.paused:
            self.resume()
        self._signal(signal.SIGTERM)
        if not self._wait_exit(timeout_s):
            logger.warning("node %d ignored SIGTERM for %.0f s; killing it", self.node_id, timeout_s)
            self._signal(signal.SIGKILL)
        self._reap()

    def send_sigterm(self) -> None:
        """SIGTERM, and nothing else: a controller resigns and exits, a
        broker starts its controlled shutdown (and exits when the
        controller says so)."""
        if self.process is None:
            return
        if self.paused:
            self.resume()
        self._signal(signal.SIGTERM)

    async def stop_gracefully(self, timeout_s: float) -> bool:
        """SIGTERM and wait (without blocking the event loop) for the exit;
        SIGKILL after ``timeout_s``. Returns True when it exited by itself."""
        if not self.running:
            self.process = None
            return True
        self.send_sigterm()
        with trio.move_on_after(timeout_s):
            while self.running:
                await trio.sleep(0.05)
        clean = not self.running
        if not clean:
            logger.warning("node %d ignored SIGTERM for %.0f s; killing it", self.node_id, timeout_s)
        self.kill()
        return clean

    def pause(self) -> None:
        """SIGSTOP: the process freezes (a long GC pause), its sockets stay open."""
        if self.running and not self.paused:
            self._signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False

    def _signal(self, signum: int) -> None:
        assert self.process is not None
        if self.process.returncode is not None:
            return  # reaped: its pid may be another process's by now
        try:
            os.kill(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def _forget(self) -> None:
        """Tell the guard, once, that this node's group has ended: before
        its leader is reaped (every reap here comes after it), since until
        then the pid cannot be reused and the guard never signals a
        stranger's group."""
        if self.guard is not None and self.guarded_pgid is not None:
            self.guard.forget(self.guarded_pgid)
        self.guarded_pgid = None

    def _wait_exit(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the process to exit, without
        reaping it; whether it did."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while self.process.returncode is None and not _has_exited(self.process.pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_EXIT_POLL_S)
        return True

    def _reap(self) -> None:
        assert self.process is not None
        if not self._wait_exit(10.0):  # pragma: no cover - SIGKILL cannot be ignored
            logger.error("node %d did not die", self.node_id)
        else:
            self._forget()
            self.process.wait()
        self.process = None
        self.paused = False


class ProcessGroup:
    """Every node process of a run; ``stop_all`` leaves nothing behind."""

    def __init__(self) -> None:
        self.nodes: dict[int, NodeProcess] = {}
        self.guard = OrphanGuard()

    def add(self, node: NodeProcess) -> NodeProcess:
        node.guard = self.guard
        self.nodes[node.node_id] = node
        return node

    def of_role(self, role: str) -> list[NodeProcess]:
        return [node for _, node in sorted(self.nodes.items()) if node.role == role]

    def ids(self, role: str | None = None) -> list[int]:
        return [node_id for node_id, node in sorted(self.nodes.items()) if role is None or node.role == role]

    def stop_all(self) -> None:
        for node in self.nodes.values():
            try:
                node.kill()
            except Exception:  # noqa: BLE001 - keep stopping the others
                logger.exception("could not stop node %d", node.node_id)
        # Nothing is left for the watchdog to kill: it exits (a node started
        # after this starts a new one).
        self.guard.close()
