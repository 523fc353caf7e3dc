"""Shared test configuration.

Hypothesis profiles: ``quick`` (the default, used by ``make test``) keeps the
suite within its time budget; ``long`` (``HYPOTHESIS_PROFILE=long``, used by
``make soak``) explores far more examples. Neither profile has a deadline:
timing on a loaded 2-core machine is not a property of the code.
"""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "quick",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "long",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(scope="session")
def spark():
    """A local[2] Spark session shared by every test that needs one (the
    checker's tests and the docs' example histories): one per test run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from jepsen_like.checker import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


def _skip_reason(report) -> str:
    """The reason a skip report gives (``longrepr`` is ``(path, line,
    "Skipped: reason")`` for a skip inside a test or a fixture)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    """One loud line when the browser tests skipped for want of Chromium
    (or Pyodide), and one when the Prometheus tests skipped for want of
    Prometheus: a skip among hundreds of passes is otherwise easy to miss
    (it shows even with -q). Found among the run's skip reports by their
    reason's start, so that skips on pytest-xdist's workers count too."""
    from headless_chromium import LOUD_SKIP_PREFIX as BROWSER_PREFIX
    from prometheus_tools import LOUD_SKIP_PREFIX as PROMETHEUS_PREFIX

    reasons = [_skip_reason(report) for report in terminalreporter.stats.get("skipped", [])]
    for prefix, what in ((BROWSER_PREFIX, "BROWSER"), (PROMETHEUS_PREFIX, "PROMETHEUS")):
        loud = [reason.removeprefix(prefix) for reason in reasons if reason.startswith(prefix)]
        if loud:
            terminalreporter.write_line(
                f"{what} TESTS SKIPPED ({len(loud)}): {'; '.join(sorted(set(loud)))}", red=True, bold=True
            )
