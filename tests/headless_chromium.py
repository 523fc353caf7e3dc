"""Headless Chromium for the tests that render a page (the campaign report,
the simulator's replay): Debian's ``chromium`` package when present, else
the caller skips just the rendering part. The flags keep it off this
machine's closed network (see the env notes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT_S = 60


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (Debian package 'chromium'): only the HTML structure is checked")
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
