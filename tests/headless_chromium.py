"""Headless Chromium for the tests that render a page (the campaign report,
the simulator's replay): Debian's ``chromium`` package, which ``make test``
installs when it can (tools/browser-tools.sh, as root with apt). Without it
the caller skips just the rendering part, and the run ends with one loud
line saying so (``tests/conftest.py`` prints :data:`SKIPPED`), so that a CI
machine that never renders a page does not look green by accident. The
flags keep it off this machine's closed network (see the env notes);
``--no-sandbox`` because the tests may run as root, where Chromium's sandbox
refuses to start.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT_S = 60


MISSING_REASON = (
    f"no {CHROMIUM} (Debian package 'chromium'; tools/browser-tools.sh installs it as root): "
    "only the HTML structure is checked"
)
# The ids of the tests that skipped for want of Chromium, for the summary line.
SKIPPED: list[str] = []


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on ``args`` with a fresh profile under
    ``tmp_path``; the finished process (its exit code is the caller's to
    judge). Skips the calling test when Chromium is not installed; fails it
    when Chromium runs past :data:`CHROMIUM_TIMEOUT_S`."""
    if not CHROMIUM.exists():
        SKIPPED.append(os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0])
        pytest.skip(MISSING_REASON)
    profile = tmp_path / "chromium-profile"
    argv = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--hide-scrollbars", "--enable-logging=stderr", "--v=0", *args,
    ]  # fmt: skip
    env = dict(os.environ, HOME=str(tmp_path))
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within {CHROMIUM_TIMEOUT_S} s")


def console_errors(stderr: str) -> list[str]:
    """Uncaught script errors the page logged."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
