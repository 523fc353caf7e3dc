"""No node outlives its campaign, even when the campaign is killed.

A campaign starts its nodes (pykraft's, or Kafka's JVMs) each in a session
of its own, so that a pause or a kill -9 reaches a node's whole process
group and nothing else. The harness stops them when it ends; but a harness
killed with SIGKILL (or by the kernel's out-of-memory killer) runs no code,
and its nodes were left running, holding their ports and data directories.

The guard is a small watchdog process started beside the first node. The
harness tells it over a pipe which process groups it started and which it
has reaped (``+PGID`` and ``-PGID``, one per line). When the pipe reaches
its end, the harness is gone, whichever way it ended: the kernel closes a
dead process's files. The watchdog then kills every group it was not told
had ended, and exits. A harness that stops its nodes itself leaves the
watchdog nothing to do.

A group is forgotten before the harness reaps its leader: until then the
leader's pid cannot be reused, so the watchdog never signals a stranger's
process. The watchdog imports nothing but the standard library, and runs
this file by its path (not the package, whose imports it does not need).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable

logger = logging.getLogger("pykraft.campaign")

# How long close() waits for the watchdog to read its pipe's end and exit.
WATCHDOG_EXIT_TIMEOUT_S = 10.0


def groups_left(lines: Iterable[str]) -> list[int]:
    """The process groups the harness's messages leave started and not
    reaped, in order. A line that is not ``+N`` or ``-N`` (N a positive
    integer) is ignored: the pipe is the harness's, but nothing the
    watchdog reads is trusted to be well formed."""
    tracked: dict[int, None] = {}
    for line in lines:
        text = line.strip()
        if len(text) < 2 or text[0] not in "+-" or not text[1:].isdigit():
            continue
        pgid = int(text[1:])
        if pgid <= 1:
            continue
        if text[0] == "+":
            tracked[pgid] = None
        else:
            tracked.pop(pgid, None)
    return list(tracked)


def kill_groups(pgids: Iterable[int]) -> list[int]:
    """SIGCONT (a paused group cannot act on anything) and SIGKILL to each
    group; returns the groups that were still there."""
    killed = []
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGCONT)
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        killed.append(pgid)
    return killed


def watchdog_main() -> int:
    """The watchdog: read the harness's messages until the pipe ends, then
    kill what is left."""
    # Its own session already keeps a terminal's Ctrl-C away; a stray
    # SIGINT or SIGTERM must not end it before the pipe does either.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    killed = kill_groups(groups_left(sys.stdin))
    if killed:
        print(
            f"pykraft campaign orphan guard: the campaign process is gone; killed its node process groups {killed}",
            file=sys.stderr,
            flush=True,
        )
    return 0


class OrphanGuard:
    """The harness's side: started on the first :meth:`track`; thread-safe
    (nodes start in a worker thread, and stop in the event loop's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchdog: subprocess.Popen | None = None
        self._failed = False

    @property
    def watchdog_pid(self) -> int | None:
        return None if self._watchdog is None else self._watchdog.pid

    def track(self, pgid: int) -> None:
        """A node's process group was started."""
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        """A node's process group has ended (call before reaping its leader)."""
        self._send(f"-{pgid}\n")

    def close(self) -> None:
        """Every node has been stopped: end the pipe, and wait for the
        watchdog to exit (it has nothing left to kill)."""
        with self._lock:
            watchdog, self._watchdog = self._watchdog, None
            self._failed = False
        if watchdog is None:
            return
        try:
            assert watchdog.stdin is not None
            watchdog.stdin.close()
        except OSError:
            pass
        try:
            watchdog.wait(timeout=WATCHDOG_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits at the pipe's end
            logger.error("the orphan guard %d did not exit; killing it", watchdog.pid)
            watchdog.kill()
            watchdog.wait()

    def _send(self, message: str) -> None:
        with self._lock:
            if self._failed:
                return
            try:
                if self._watchdog is None:
                    self._watchdog = subprocess.Popen(
                        [sys.executable, "-I", os.path.abspath(__file__)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL,
                        text=True,
                        start_new_session=True,
                    )
                assert self._watchdog.stdin is not None
                self._watchdog.stdin.write(message)
                self._watchdog.stdin.flush()
            except OSError as error:
                # The run goes on; only a killed harness would leave nodes.
                self._failed = True
                logger.warning("the orphan guard is not running (%s): a killed campaign may leave its nodes running", error)


if __name__ == "__main__":
    sys.exit(watchdog_main())
