"""Client workloads. Every operation is recorded invoke -> ok / fail / info
exactly as the design says: ``fail`` only when the operation certainly did
not happen, ``info`` when it may have, and a fresh process id after every
``info`` (a Jepsen process has one operation in flight, forever)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

import trio

from quorum.client import IndeterminateError, QuorumClient, QuorumClientError
from quorum.runtime import KeyValueStateMachine

from ._history import HistoryRecorder


@dataclass(slots=True)
class RegisterWorkloadOptions:
    clients: int = 6
    read_mode: str = "linearizable"  # or "leader-local"
    keys_live: int = 3  # keys in use at once
    ops_per_key: int = 120  # then the key is retired (keeps each key's history small)
    request_timeout_s: float = 2.0
    think_s: float = 0.01
    read_fraction: float = 0.5  # the rest: 60% writes, 40% compare-and-set


class RegisterWorkload:
    """Independent registers: read / write / cas of unique values, through
    the leader, each read in the campaign's read mode. Keys rotate so each
    key's history stays small enough for the per-key search."""

    def __init__(
        self,
        history: HistoryRecorder,
        bootstrap_for: Callable[[int], list[str]],
        options: RegisterWorkloadOptions,
        *,
        cluster_id: str,
        rng: random.Random,
    ) -> None:
        self.history = history
        self.bootstrap_for = bootstrap_for
        self.options = options
        self.cluster_id = cluster_id
        self.rng = rng
        self._process_ids = itertools.count(0)
        self._values = itertools.count(1)
        self._key_counter = itertools.count(0)
        self._live_keys = [self._new_key() for _ in range(options.keys_live)]
        self._ops_on_key: dict[str, int] = {}
        self._last_written: dict[str, int] = {}

    def touched_keys(self) -> list[str]:
        return sorted(self._ops_on_key)

    def _new_key(self) -> str:
        return f"r{next(self._key_counter)}"

    def _pick_key(self) -> str:
        index = self.rng.randrange(len(self._live_keys))
        key = self._live_keys[index]
        count = self._ops_on_key.get(key, 0) + 1
        self._ops_on_key[key] = count
        if count >= self.options.ops_per_key:
            self._live_keys[index] = self._new_key()
        return key

    async def run(self, deadline_s: float) -> None:
        """Run every client until ``deadline_s`` (trio's clock)."""
        async with trio.open_nursery() as nursery:
            for client_index in range(self.options.clients):
                nursery.start_soon(self._client, client_index, deadline_s)

    async def _client(self, client_index: int, deadline_s: float) -> None:
        bootstrap = self.bootstrap_for(client_index)
        while trio.current_time() < deadline_s:
            process = next(self._process_ids)
            # One QuorumClient per process id: after an indeterminate result
            # the connection (and the process) is retired.
            async with QuorumClient(
                bootstrap,
                cluster_id=self.cluster_id,
                request_timeout_s=self.options.request_timeout_s,
                retry_timeout_s=self.options.request_timeout_s,
            ) as client:
                while trio.current_time() < deadline_s:
                    indeterminate = await self._one_operation(client, process)
                    if indeterminate:
                        break
                    await trio.sleep(self.options.think_s)

    async def _one_operation(self, client: QuorumClient, process: int) -> bool:
        """One operation, recorded; returns True when its outcome is unknown."""
        key = self._pick_key()
        roll = self.rng.random()
        record = self.history.record
        extra: dict[str, object] = {}
        reads = self.options.read_fraction
        if roll < reads:
            f, value = "read", None
            extra["mode"] = self.options.read_mode
        elif roll < reads + 0.6 * (1 - reads):
            f, value = "write", next(self._values)
        else:
            f, value = "cas", [self._last_written.get(key), next(self._values)]
        record(process, "invoke", f, key, value, **extra)
        try:
            if f == "read":
                read_offset, answer = await client.read(key.encode(), mode=self.options.read_mode)
                found, version = KeyValueStateMachine.decode_answer(answer) if answer else (None, -1)
                shown = int(found) if found is not None else None
                record(process, "ok", f, key, shown, offset=version, read_offset=read_offset, **extra)
            elif f == "write":
                offset = await client.propose([KeyValueStateMachine.encode_put(key.encode(), str(value).encode())])
                self._last_written[key] = value
                record(process, "ok", f, key, value, offset=offset)
            else:
                expected, new = value
                expected_bytes = str(expected).encode() if expected is not None else None
                offset, (answer,) = await client.propose_with_results(
                    [KeyValueStateMachine.encode_cas(key.encode(), expected_bytes, str(new).encode())]
                )
                if answer == KeyValueStateMachine.CAS_APPLIED:
                    self._last_written[key] = new
                    record(process, "ok", f, key, value, offset=offset)
                else:
                    record(process, "fail", f, key, value, error="precondition failed")
        except IndeterminateError as error:
            record(process, "info", f, key, value, error=f"indeterminate: {error}"[:200], **extra)
            return True
        except QuorumClientError as error:
            record(process, "fail", f, key, value, error=str(error)[:200], **extra)
        return False


__all__ = ["RegisterWorkload", "RegisterWorkloadOptions"]
