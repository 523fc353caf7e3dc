"""The leader's cost per record with N observers' Fetches parked, in process.

    python -m bench.observer_fetch_bench [--observers 1000 5000] [--records 200] [--rounds 3]

A sans-IO leader (``quorum.QuorumNode``, three voters, memory only, logical
ticks, no trio, no network) with N observers (brokers) that each keep one
Fetch parked on it, as brokers heartbeating through their metadata fetches
do. Then, R times, what a broker's heartbeat that changes the cluster (an
unfencing) makes the controller do, pipelined as a busy controller is: one
record proposed (and made durable at once: a memory disk); the Fetches of
the observers answered meanwhile (each sends its next one at once, from the
end of the records it got: parked, or answered when it has news); then the
two followers' Fetches sent since the previous record, which acknowledge
it (committing it) and find this one. Timed in process CPU time
(``time.process_time``): the core's steps only, not the bench's own
bookkeeping nor any encoding (the runtime's work, on top).

Printed per N: the leader's CPU per record appended and per observer Fetch
answered, the Fetch responses built per record (voters' and observers'),
and the most observer responses one step put ahead of a voter's response
(the driver sends a step's messages in order).
The heartbeat carried in the Fetch extension is left out (``extension``
None): ``bench.unfence_cpu_bench`` measures the controller's part.

It uses only public names of ``quorum`` and imports nothing of ``bench``,
so that it runs against any tree (``PYTHONPATH=<tree>``), alternating, to
compare them.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

from quorum import FetchRequest, FetchResponse, Output, QuorumConfig, QuorumNode, Role, VoteRequest, VoteResponse

LEADER = 1
FOLLOWERS = (2, 3)
FIRST_OBSERVER = 1000
# A fetch session in the top bits of a request id (the core's convention:
# ``request_id >> 32`` names the fetcher's process).
SESSION = 1 << 32


@dataclass
class Fetcher:
    """One replica's side, as little as the leader needs: its log end and
    the epoch of its last record, and its next request id."""

    node_id: int
    fetch_offset: int = 0
    last_fetched_epoch: int = 0
    next_request: int = SESSION

    def fetch(self, epoch: int) -> FetchRequest:
        self.next_request += 1
        return FetchRequest(
            src=self.node_id,
            dst=LEADER,
            epoch=epoch,
            fetch_offset=self.fetch_offset,
            last_fetched_epoch=self.last_fetched_epoch,
            request_id=self.next_request,
        )

    def took(self, response: FetchResponse) -> None:
        if response.records:
            self.fetch_offset = response.records[-1].offset + 1
            self.last_fetched_epoch = response.records[-1].epoch


@dataclass
class Tally:
    """What the leader sent while measured."""

    voter_responses: int = 0
    observer_responses: int = 0
    # The most observer responses one output put ahead of a voter's.
    observers_ahead_of_a_voter_max: int = 0


class Leader:
    """The leader's core and what it asks of its driver (persist, then
    report durable), the followers and observers answering it."""

    def __init__(self, observers: int) -> None:
        config = QuorumConfig(node_id=LEADER, voters=(LEADER, *FOLLOWERS), pre_vote=False)
        self.node = QuorumNode(config, rng=random.Random(1))
        self.fetchers = {node_id: Fetcher(node_id) for node_id in FOLLOWERS}
        self.fetchers.update({n: Fetcher(n) for n in range(FIRST_OBSERVER, FIRST_OBSERVER + observers)})
        self.tally = Tally()
        self.cpu_s = 0.0
        self._elect()

    def _elect(self) -> None:
        node = self.node
        for _ in range(10_000):
            out = self._timed(node.tick)
            votes = [m for m in self._settle(out) if isinstance(m, VoteRequest)]
            if votes:
                break
        else:
            raise RuntimeError("the leader never stood")
        for vote in votes:
            self._settle(
                self._timed(
                    node.step,
                    VoteResponse(src=vote.dst, dst=LEADER, epoch=vote.epoch, granted=True, pre_vote=False),
                )
            )
        if node.role is not Role.LEADER:
            raise RuntimeError(f"the leader did not win: {node.role}")

    def _timed(self, call, *args) -> Output:  # type: ignore[no-untyped-def]
        started = time.process_time()
        out = call(*args)
        self.cpu_s += time.process_time() - started
        return out

    def _settle(self, out: Output) -> list:
        """Everything ``out`` sends, with the output of reporting its
        persistence durable at once (a memory disk)."""
        sent = list(out.early_messages) + list(out.messages)
        if out.persist_seq is not None:
            sent += self._settle(self._timed(self.node.persisted, out.persist_seq))
        return sent

    def _count(self, sent: Iterable) -> list[FetchResponse]:
        responses = [m for m in sent if isinstance(m, FetchResponse)]
        observers_so_far = 0
        for response in responses:
            if response.dst in FOLLOWERS:
                self.tally.voter_responses += 1
                self.tally.observers_ahead_of_a_voter_max = max(
                    self.tally.observers_ahead_of_a_voter_max, observers_so_far
                )
            else:
                self.tally.observer_responses += 1
                observers_so_far += 1
        return responses

    def deliver(self, requests: list[FetchRequest]) -> list[FetchRequest]:
        """Hand ``requests`` to the leader; every response makes its
        fetcher take the records and fetch again. Observers' next Fetches
        are delivered at once, until none is answered (all parked); the
        followers' are returned, to be delivered after the next record is
        proposed (a pipeline: the controller appends while the followers'
        acknowledgements travel)."""
        node = self.node
        held: list[FetchRequest] = []
        while requests:
            answers: list[FetchResponse] = []
            for request in requests:
                answers += self._count(self._settle(self._timed(node.step, request)))
            requests = []
            for response in answers:
                fetcher = self.fetchers[response.dst]
                fetcher.took(response)
                (held if response.dst in FOLLOWERS else requests).append(fetcher.fetch(node.epoch))
        return held

    def park_everyone(self) -> None:
        """Every follower and observer fetches until it has caught up (the
        election's record committed) and its Fetch is parked."""
        waiting = self.deliver([fetcher.fetch(self.node.epoch) for _, fetcher in sorted(self.fetchers.items())])
        while waiting:
            waiting = self.deliver(waiting)

    def propose_one(self, payload: bytes, followers: list[FetchRequest]) -> list[FetchRequest]:
        """One record proposed; the observers' next Fetches, then the
        followers' Fetches sent since the previous record (they acknowledge
        it, which commits it, and find this one). Returns the followers'
        next Fetches, as ``deliver``."""
        _offset, out = self._timed(self.node.propose, [payload])
        observers: list[FetchRequest] = []
        held: list[FetchRequest] = []
        for response in self._count(self._settle(out)):
            fetcher = self.fetchers[response.dst]
            fetcher.took(response)
            (held if response.dst in FOLLOWERS else observers).append(fetcher.fetch(self.node.epoch))
        return held + self.deliver(observers + list(followers))


def one_round(observers: int, records: int) -> tuple[float, Tally]:
    """(leader CPU s for ``records`` records, what it sent meanwhile)."""
    leader = Leader(observers)
    node = leader.node
    leader.park_everyone()
    if node.high_watermark != node.log.end_offset:
        raise RuntimeError("the leader's first record did not commit")
    leader.cpu_s = 0.0
    leader.tally = Tally()
    gc.collect()
    followers: list[FetchRequest] = []  # every Fetch is parked
    for i in range(records):
        followers = leader.propose_one(b"unfence broker %d" % i, followers)
    while followers:  # the last record's acknowledgements
        followers = leader.deliver(followers)
    if node.high_watermark != node.log.end_offset or node.role is not Role.LEADER:
        raise RuntimeError("a record did not commit")
    return leader.cpu_s, leader.tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--observers", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(
        f"{'observers':>9} {'records':>7} {'CPU/record ms':>13} {'CPU/obs. answer us':>18}"
        f" {'voter resp./rec':>15} {'obs. resp./rec':>14} {'obs. ahead of a voter':>21}"
    )
    for observers in args.observers:
        cpu: list[float] = []
        tally = Tally()
        for _ in range(args.rounds):
            cpu_s, tally = one_round(observers, args.records)
            cpu.append(cpu_s)
        best = min(cpu)
        print(
            f"{observers:>9} {args.records:>7} {best / args.records * 1e3:>13.2f}"
            f" {best / max(1, tally.observer_responses) * 1e6:>18.2f}"
            f" {tally.voter_responses / args.records:>15.2f} {tally.observer_responses / args.records:>14.2f}"
            f" {tally.observers_ahead_of_a_voter_max:>21}"
            f"   (CPU min of {args.rounds}; median {statistics.median(cpu) / args.records * 1e3:.2f} ms/record)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
