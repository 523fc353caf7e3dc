"""Debian's ``prometheus`` package for the tests that need a real Prometheus
or promtool (``tools/prometheus-tools.sh`` installs it in ``make test`` when
it can). Without it those tests skip, and the run ends with one loud line
saying so (``tests/conftest.py`` prints :data:`SKIPPED`)."""

from __future__ import annotations

import os

import pytest

from jepsen_like.prometheus import MISSING_REASON, installed

# The ids of the tests that skipped for want of Prometheus, for the summary line.
SKIPPED: list[str] = []


def require_prometheus() -> None:
    """Skip the calling test (and note it) when prometheus or promtool is
    not installed."""
    if not installed():
        SKIPPED.append(os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0])
        pytest.skip(MISSING_REASON)
