"""The simulated network: per directed link delay, loss, duplication and
reordering, plus partitions, all drawn from the simulation's one RNG."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True)
class LinkFaults:
    """Fault rates of the whole network (every directed link alike)."""

    delay_min_ms: float = 0.5
    delay_max_ms: float = 2.0
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    # A reordered message takes up to this much extra time, so later
    # messages on the same link may overtake it.
    reorder_rate: float = 0.0
    reorder_delay_max_ms: float = 50.0


class Network:
    """Decides, for each message, whether and when it arrives.

    Partitions are sets of blocked directed links ``(src, dst)``; a blocked
    message is silently dropped (as iptables DROP does), so the sender only
    notices through its own timeouts.
    """

    def __init__(self, rng: random.Random, faults: LinkFaults | None = None) -> None:
        self._rng = rng
        self.faults = faults or LinkFaults()
        self._blocked: set[tuple[int, int]] = set()

    # -- partitions ---------------------------------------------------------------

    @property
    def blocked_links(self) -> frozenset[tuple[int, int]]:
        return frozenset(self._blocked)

    def block(self, src: int, dst: int) -> None:
        self._blocked.add((src, dst))

    def isolate(self, node: int, others: list[int]) -> None:
        """Cut ``node`` from every one of ``others``, both ways."""
        for other in others:
            if other != node:
                self._blocked.add((node, other))
                self._blocked.add((other, node))

    def split(self, side_a: list[int], side_b: list[int]) -> None:
        for a in side_a:
            for b in side_b:
                if a != b:
                    self._blocked.add((a, b))
                    self._blocked.add((b, a))

    def rejoin(self, side_a: list[int], side_b: list[int]) -> None:
        """Mend every link between the two sides, both ways (undoes ``split``)."""
        for a in side_a:
            for b in side_b:
                self._blocked.discard((a, b))
                self._blocked.discard((b, a))

    def unblock(self, src: int, dst: int) -> None:
        """Mend one directed link (a no-op when it was not cut)."""
        self._blocked.discard((src, dst))

    def heal(self) -> None:
        self._blocked.clear()

    def is_blocked(self, src: int, dst: int) -> bool:
        return (src, dst) in self._blocked

    # -- delivery -------------------------------------------------------------------

    def deliveries(self, src: int, dst: int) -> list[float]:
        """Delays (ms) after which copies of one message arrive; empty when
        it is lost."""
        if (src, dst) in self._blocked:
            return []
        faults = self.faults
        rng = self._rng
        if faults.drop_rate and rng.random() < faults.drop_rate:
            return []
        copies = 2 if faults.duplicate_rate and rng.random() < faults.duplicate_rate else 1
        delays = []
        for _ in range(copies):
            delay = rng.uniform(faults.delay_min_ms, faults.delay_max_ms)
            if faults.reorder_rate and rng.random() < faults.reorder_rate:
                delay += rng.uniform(0, faults.reorder_delay_max_ms)
            delays.append(delay)
        return delays

    def round_trip_ms(self) -> float:
        """A typical round trip, for reporting."""
        return self.faults.delay_min_ms + self.faults.delay_max_ms
