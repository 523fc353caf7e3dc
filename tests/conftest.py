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


def pytest_terminal_summary(terminalreporter):
    """One loud line when the browser tests skipped for want of Chromium,
    and one when the Prometheus tests skipped for want of Prometheus: a skip
    among hundreds of passes is otherwise easy to miss (it shows even with
    -q)."""
    headless_chromium = sys.modules.get("headless_chromium")
    skipped = getattr(headless_chromium, "SKIPPED", [])
    if skipped:
        reasons = "; ".join(sorted(headless_chromium.SKIP_REASONS)) or headless_chromium.MISSING_REASON
        terminalreporter.write_line(f"BROWSER TESTS SKIPPED ({len(skipped)}): {reasons}", red=True, bold=True)
    prometheus_tools = sys.modules.get("prometheus_tools")
    skipped = getattr(prometheus_tools, "SKIPPED", [])
    if skipped:
        terminalreporter.write_line(
            f"PROMETHEUS TESTS SKIPPED ({len(skipped)}): {prometheus_tools.MISSING_REASON}", red=True, bold=True
        )
