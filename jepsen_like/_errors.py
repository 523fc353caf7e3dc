"""The harness's own "bug in us" error.

What the harness finds wrong with the system under test is a finding, not
an exception of this kind: an ``InvariantViolation`` in a simulated run, an
anomaly in the checker's report. ``HarnessInvariantError`` says the harness
itself is broken (the simulator met an event it does not know, or its
record of the truth skipped an offset), so the run proves nothing.
"""

from __future__ import annotations


class HarnessInvariantError(AssertionError):
    """A bug in jepsen_like itself, never a finding about the system under
    test. Never caught: a run that hits it has no verdict."""
