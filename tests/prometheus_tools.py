"""Debian's ``prometheus`` package for the tests that need a real Prometheus
or promtool (``tools/prometheus-tools.sh`` installs it in ``make test`` when
it can). Without it those tests skip, and the run ends with one loud line
saying so (``tests/conftest.py`` counts the skips whose reason starts with
:data:`LOUD_SKIP_PREFIX`)."""

from __future__ import annotations


import pytest

from jepsen_like.prometheus import MISSING_REASON, installed

# The start of the reason of every skip for want of Prometheus, by which the
# summary line finds them (from pytest-xdist's workers too).
LOUD_SKIP_PREFIX = "prometheus missing: "


def require_prometheus() -> None:
    """Skip the calling test (and note it) when prometheus or promtool is
    not installed."""
    if not installed():
        pytest.skip(LOUD_SKIP_PREFIX + MISSING_REASON)
