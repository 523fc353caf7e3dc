"""jepsen_like: fault injection, histories and their checking for pykraft.

Subpackages: ``sim`` (the deterministic simulator), ``checker`` (the Spark
history checker, which imports nothing of the system it checks).
"""
