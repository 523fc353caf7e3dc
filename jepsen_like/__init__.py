"""jepsen_like: fault injection, histories and their checking for pykraft.

Subpackages: ``sim`` (the deterministic simulator), ``checker`` (the Spark
history checker, which imports nothing of the system it checks).
``HarnessInvariantError`` is the harness's own "bug in us" error.
"""

from ._errors import HarnessInvariantError

__all__ = ["HarnessInvariantError"]
