"""The write workloads of the metadata benchmark's peers, in terms of topic
creations: a peer whose "write" is one topic creation defines
``_create_groups`` once and gets every workload method of ``Cluster`` from
``TopicCreationWrites``. The values themselves are not sent (a topic's name
is the write); only how many there are and how they are grouped counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


class TopicCreationWrites:
    """Mixin (list it before ``Cluster`` in the bases): every write workload
    as ``_create_groups(sizes, in_flight, deadline)``, one request creating
    ``size`` topics for each entry of ``sizes``, at most ``in_flight`` at a
    time, until ``deadline`` (``time.monotonic()``); it returns each
    request's latency in seconds. A single write or batch waits at most
    ``request_timeout_s``."""

    request_timeout_s: float

    # Given by the class that lists this mixin (each system's own admin path).
    _create_groups: Callable[[Sequence[int], int, float], list[float]]

    def write(self, value: bytes) -> None:
        self._create_groups([1], 1, time.monotonic() + self.request_timeout_s)

    def run_sequential(self, values: Sequence[bytes], deadline: float) -> list[float]:
        return self._create_groups([1] * len(values), 1, deadline)

    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        return self._create_groups([1] * len(values), in_flight, deadline)

    def write_batch(self, values: Sequence[bytes]) -> None:
        self._create_groups([len(values)], 1, time.monotonic() + self.request_timeout_s)

    def write_batches(self, batches: Sequence[Sequence[bytes]], deadline: float) -> list[float]:
        return self._create_groups([len(batch) for batch in batches], 1, deadline)

    def write_batches_concurrently(self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float) -> list[float]:
        return self._create_groups([len(batch) for batch in batches], clients, deadline)
