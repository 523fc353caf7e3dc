"""PySyncObj peer: 3 PySyncObj voters as separate processes on loopback.

Each voter is `python -m bench.peers.pysyncobj_server` (see that file for the
front protocol and for what PySyncObj does about fsync: nothing -- its journal
is an mmap'ed file, never msync'ed or fsync'ed; survives kill -9, not power
loss).  Two variants run as separate columns:
- `pysyncobj`: appendEntriesUseBatch=False ("batching off": every command is
  sent to the followers at once, no wait for the 100 ms append period);
- `pysyncobj-batch`: appendEntriesUseBatch=True (the library default).
`--pysyncobj-msync` adds a third variant with an msync after every journal
append (batching off).

Client (this module), talking to the voters' TCP fronts:
- sequential: one blocking socket to the leader's front, one PUT at a time;
- 64 in flight: one asyncio connection to the leader's front with 64
  pipelined requests outstanding (the front turns each into a replicated call
  with a completion callback, so the voter sees 64 concurrent commands);
- batch of 100: one BATCH request = one `put_batch(items)` replicated call =
  ONE PySyncObj log entry carrying 100 records (not 100 calls);
- failover: from the kill, a PUT every 20 ms on a fresh connection to the
  surviving voters in turn, earlier ones kept waiting; first success wins.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .._common import (
    LOOPBACK,
    Cluster,
    ManagedProcess,
    PeerUnavailable,
    free_ports,
    hedged_first_success,
    key_for,
    make_temp_dir,
    make_value,
    package_version,
    remove_temp_dir,
    timed_requests_on_connections,
    wait_for,
    wait_for_leader,
    wait_for_port,
)

INSTALL_HINT = "install it with: .venv/bin/pip install -e '.[bench]' (pysyncobj)"
KEY_SPACE = 1000
OP_PUT = 1
OP_BATCH = 2
OP_STATUS = 3
HEADER = struct.Struct(">IIB")


def _put_payload(key: str, value: bytes) -> bytes:
    encoded = key.encode()
    return struct.pack(">H", len(encoded)) + encoded + value


def _batch_payload(items: Sequence[tuple[str, bytes]]) -> bytes:
    parts = [struct.pack(">I", len(items))]
    for key, value in items:
        encoded = key.encode()
        parts.append(struct.pack(">H", len(encoded)) + encoded + struct.pack(">I", len(value)) + value)
    return b"".join(parts)


def _frame(request_id: int, op: int, payload: bytes) -> bytes:
    return HEADER.pack(HEADER.size - 4 + len(payload), request_id, op) + payload


class FrontClient:
    """Blocking client for one voter's front; one request at a time."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.port = port
        self._socket = socket.create_connection((LOOPBACK, port), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)

    def call(self, op: int, payload: bytes) -> bytes:
        request_id = next(self._ids)
        self._socket.sendall(_frame(request_id, op, payload))
        head = self._recv_exactly(4)
        (frame_len,) = struct.unpack(">I", head)
        frame = self._recv_exactly(frame_len)
        answered_id, status = struct.unpack_from(">IB", frame, 0)
        if answered_id != request_id:
            raise RuntimeError(f"pysyncobj front answered request {answered_id}, expected {request_id}")
        if status != 0:
            raise RuntimeError(f"pysyncobj: {frame[5:].decode(errors='replace')}")
        return frame[5:]

    def _recv_exactly(self, size: int) -> bytes:
        chunks = []
        remaining = size
        while remaining > 0:
            chunk = self._socket.recv(remaining)
            if not chunk:
                raise ConnectionError("pysyncobj front closed the connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._socket.close()


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    (frame_len,) = struct.unpack(">I", await reader.readexactly(4))
    frame = await reader.readexactly(frame_len)
    request_id, status = struct.unpack_from(">IB", frame, 0)
    return request_id, status, frame[5:]


def front_status(port: int, timeout_s: float = 1.0) -> dict:
    client = FrontClient(port, timeout_s)
    try:
        return json.loads(client.call(OP_STATUS, b""))
    finally:
        client.close()


class PySyncObjCluster(Cluster):
    name = "pysyncobj"
    label = "PySyncObj"
    batching = False
    msync_each_append = False

    def __init__(self, value_bytes: int = 100, log: Callable[[str], None] = print) -> None:
        self.value_bytes = value_bytes
        self.log = log
        self.workdir: Path | None = None
        self.processes: list[ManagedProcess] = []
        self.raft_ports: list[int] = []
        self.front_ports: list[int] = []
        self._client: FrontClient | None = None
        self._write_counter = 0

    @classmethod
    def availability_problem(cls) -> str | None:
        if package_version("pysyncobj") is None:
            return f"pysyncobj not installed ({INSTALL_HINT})"
        return None

    def start(self) -> None:
        problem = self.availability_problem()
        if problem:
            raise PeerUnavailable(problem)
        self.workdir = make_temp_dir(self.name)
        ports = free_ports(2 * self.voters)
        self.raft_ports = ports[: self.voters]
        self.front_ports = ports[self.voters :]
        repo_root = Path(__file__).resolve().parents[2]
        for i in range(self.voters):
            partners = ",".join(str(p) for j, p in enumerate(self.raft_ports) if j != i)
            argv = [
                sys.executable, "-m", "bench.peers.pysyncobj_server",
                "--self-port", str(self.raft_ports[i]),
                "--partner-ports", partners,
                "--front-port", str(self.front_ports[i]),
                "--data-dir", str(self.workdir / f"node{i}"),
                "--batching", "on" if self.batching else "off",
            ]  # fmt: skip
            if self.msync_each_append:
                argv.append("--msync-each-append")
            self.processes.append(
                ManagedProcess(f"{self.name}-{i}", argv, self.workdir / f"node{i}.log", cwd=repo_root)
            )
        for process in self.processes:
            process.start()
        for i, port in enumerate(self.front_ports):
            wait_for_port(port, 30.0, self.processes)
        self.wait_healthy(60.0)

    def stop(self) -> None:
        self._close_client()
        for process in self.processes:
            process.terminate(grace_s=5.0)
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def leader_index(self) -> int | None:
        for i in range(self.voters):
            if not self.processes[i].is_alive():
                continue
            try:
                leader = front_status(self.front_ports[i]).get("leader")
            except Exception:  # noqa: BLE001
                continue
            if leader:
                port = int(leader.rsplit(":", 1)[1])
                if port in self.raft_ports and self.processes[self.raft_ports.index(port)].is_alive():
                    return self.raft_ports.index(port)
        return None

    def wait_healthy(self, timeout_s: float) -> None:
        def all_agree() -> bool:
            statuses = [front_status(port) for port in self.front_ports]
            leaders = {s["leader"] for s in statuses}
            return len(leaders) == 1 and None not in leaders and all(s["has_quorum"] for s in statuses)

        wait_for(all_agree, timeout_s, "all PySyncObj voters to agree on a leader", 0.1, self.processes)

    def kill(self, index: int) -> None:
        self.processes[index].kill9()
        self._close_client()

    def restart(self, index: int) -> None:
        self.processes[index].start()

    def rss_bytes(self) -> list[int | None]:
        return [process.rss_bytes() for process in self.processes]

    # ---- writes ---------------------------------------------------------

    def _leader_front(self) -> int:
        return self.front_ports[wait_for_leader(self, 30.0)]

    def _leader_client(self) -> FrontClient:
        if self._client is None:
            self._client = FrontClient(self._leader_front())
        return self._client

    def _next_index(self, count: int = 1) -> int:
        base = self._write_counter
        self._write_counter += count
        return base

    def write(self, value: bytes) -> None:
        self._leader_client().call(OP_PUT, _put_payload(key_for(self._next_index(), KEY_SPACE), value))

    def write_batch(self, values: Sequence[bytes]) -> None:
        base = self._next_index(len(values))
        items = [(key_for(base + i, KEY_SPACE), v) for i, v in enumerate(values)]
        self._leader_client().call(OP_BATCH, _batch_payload(items))

    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        port = self._leader_front()
        base = self._next_index(len(values))
        return asyncio.run(self._write_many_async(port, values, base, in_flight, deadline))

    async def _write_many_async(
        self, port: int, values: Sequence[bytes], base: int, in_flight: int, deadline: float
    ) -> list[float]:
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        latencies_s: list[float] = []
        started_at: dict[int, float] = {}
        slots = asyncio.Semaphore(in_flight)
        failure: list[str] = []

        async def read_responses() -> None:
            while started_at or not sending_done.is_set():
                request_id, status, payload = await _read_frame(reader)
                started = started_at.pop(request_id)
                if status != 0:
                    failure.append(payload.decode(errors="replace"))
                else:
                    latencies_s.append(time.perf_counter() - started)
                slots.release()

        sending_done = asyncio.Event()
        reader_task = asyncio.ensure_future(read_responses())
        try:
            for i, value in enumerate(values):
                if time.monotonic() >= deadline or failure or reader_task.done():
                    break
                await asyncio.wait_for(slots.acquire(), 30.0)
                request_id = i + 1
                started_at[request_id] = time.perf_counter()
                writer.write(_frame(request_id, OP_PUT, _put_payload(key_for(base + i, KEY_SPACE), value)))
                if i % 16 == 15:
                    await writer.drain()
            sending_done.set()
            if started_at:
                await asyncio.wait_for(reader_task, 60.0)
        finally:
            reader_task.cancel()
            await asyncio.gather(reader_task, return_exceptions=True)
            writer.close()
        if failure:
            raise RuntimeError(f"pysyncobj put failed: {failure[0]}")
        return latencies_s

    def write_batches_concurrently(
        self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float
    ) -> list[float]:
        port = self._leader_front()
        base = self._next_index(sum(len(batch) for batch in batches))
        return asyncio.run(self._write_batches_async(port, batches, base, clients, deadline))

    async def _write_batches_async(
        self, port: int, batches: Sequence[Sequence[bytes]], base: int, clients: int, deadline: float
    ) -> list[float]:
        async def put_batch(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = base + i * len(batches[i])
            items = [(key_for(first + j, KEY_SPACE), value) for j, value in enumerate(batches[i])]
            writer.write(_frame(i + 1, OP_BATCH, _batch_payload(items)))
            _request_id, status, payload = await asyncio.wait_for(_read_frame(reader), 30.0)
            if status != 0:
                raise RuntimeError(f"pysyncobj put_batch failed: {payload.decode(errors='replace')}")

        return await timed_requests_on_connections(port, len(batches), clients, deadline, put_batch)

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        alive_ports = [self.front_ports[i] for i in range(self.voters) if self.processes[i].is_alive()]

        async def attempt(n: int) -> bool:
            reader, writer = await asyncio.open_connection(LOOPBACK, alive_ports[n % len(alive_ports)])
            try:
                value = make_value(n, self.value_bytes, b"failover")
                writer.write(_frame(n, OP_PUT, _put_payload("bench/failover", value)))
                _request_id, status, _payload = await _read_frame(reader)
                return status == 0
            finally:
                writer.close()

        return asyncio.run(hedged_first_success(attempt, killed_at, deadline))

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        return {"pysyncobj": package_version("pysyncobj") or "?"}

    def notes(self) -> list[str]:
        durability = (
            "msync(MS_SYNC) of the journal mmap after every append (bench patch)"
            if self.msync_each_append
            else "NO fsync: journal is an mmap'ed file never msync'ed/fsync'ed by PySyncObj "
            "(survives kill -9, not power loss)"
        )
        return [
            f"{self.label}: appendEntriesUseBatch={self.batching}; journalFile+fullDumpFile set; {durability}; "
            "raftMinTimeout 0.4 s / raftMaxTimeout 1.4 s (defaults).",
            f"{self.label}: seq = one TCP connection to the leader's front, one put() at a time; 64 in flight = "
            "64 pipelined requests on one connection (replicated calls with callbacks); batch = ONE put_batch() "
            "replicated call = one log entry with 100 records.",
        ]

    def log_dir(self) -> Path | None:
        return self.workdir


class PySyncObjBatchingCluster(PySyncObjCluster):
    name = "pysyncobj-batch"
    label = "PySyncObj batch"
    batching = True


class PySyncObjMsyncCluster(PySyncObjCluster):
    name = "pysyncobj-msync"
    label = "PySyncObj msync"
    batching = False
    msync_each_append = True
