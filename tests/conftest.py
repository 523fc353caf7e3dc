"""Shared test configuration.

Hypothesis profiles: ``quick`` (the default, used by ``make test``) keeps the
suite within its time budget; ``long`` (``HYPOTHESIS_PROFILE=long``, used by
``make soak``) explores far more examples. Neither profile has a deadline:
timing on a loaded 2-core machine is not a property of the code.
"""

import os

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
