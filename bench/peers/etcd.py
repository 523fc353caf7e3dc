"""etcd peer: a 3-member etcd cluster on loopback, driven over its v3 JSON API.

Server: the `etcd` binary from Debian's `etcd-server` package (3.4 on
bookworm), three members on 127.0.0.1 with distinct client/peer ports, each
with its own data dir.  fsync is etcd's default and is left on: the WAL is
fdatasync'ed for every raft Ready batch, on the leader and on each follower,
before entries are acknowledged (group commit).

Client: no etcd Python library.  The `etcd3` package pins an old protobuf; the
v3 gRPC-gateway that every etcd 3.4 member serves on its client port speaks
JSON over HTTP/1.1 (`POST /v3/kv/put`, `/v3/kv/txn`, `/v3/maintenance/status`),
so the client is the standard library:
- sequential: one keep-alive `http.client.HTTPConnection` to the leader;
- 64 in flight: 64 keep-alive HTTP/1.1 connections to the leader driven by one
  asyncio loop, one outstanding request per connection;
- batch of 100: one `/v3/kv/txn` whose success branch holds 100 puts to 100
  distinct keys (one raft entry);
- failover: a put to each surviving member in turn until one commits.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .._common import (
    LOOPBACK,
    Cluster,
    ManagedProcess,
    PeerUnavailable,
    debian_package_version,
    free_ports,
    hedged_first_success,
    key_for,
    make_value,
    make_temp_dir,
    remove_temp_dir,
    run_version_command,
    timed_requests_on_connections,
    wait_for,
    wait_for_leader,
)

INSTALL_HINT = "install it with: apt-get update && apt-get install -y etcd-server"
KEY_SPACE = 1000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _txn_body(first: int, values: Sequence[bytes]) -> bytes:
    """One txn of puts (one raft entry), keys from `first` on."""
    return json.dumps(
        {
            "success": [
                {"request_put": {"key": _b64(key_for(first + i, KEY_SPACE).encode()), "value": _b64(v)}}
                for i, v in enumerate(values)
            ]
        }
    ).encode()


def _post_request(port: int, path: str, body: bytes) -> bytes:
    """The bytes of one keep-alive HTTP/1.1 POST of a JSON body."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _put_body(key: str, value: bytes) -> bytes:
    return json.dumps({"key": _b64(key.encode()), "value": _b64(value)}).encode()


def _http_post(port: int, path: str, body: bytes, timeout_s: float) -> dict:
    """One POST on a fresh connection; raises on non-200."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout_s)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"etcd {path} on :{port}: HTTP {response.status} {payload[:200]!r}")
        return json.loads(payload or b"{}")
    finally:
        connection.close()


class _KeepAliveClient:
    """A keep-alive HTTP/1.1 connection to one member; reconnects on error."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> bytes:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=self.timeout_s)
        try:
            self._connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = self._connection.getresponse()
            payload = response.read()
        except Exception:
            self.close()
            raise
        if response.status != 200:
            raise RuntimeError(f"etcd {path} on :{self.port}: HTTP {response.status} {payload[:200]!r}")
        return payload

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


async def _read_http_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Read one HTTP/1.1 response (Content-Length or chunked)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed by etcd")
    status = int(status_line.split()[1])
    content_length = None
    chunked = False
    for _ in range(100):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            content_length = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        parts = []
        for _ in range(10_000):
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readline()
                break
            parts.append(await reader.readexactly(size))
            await reader.readline()
        return status, b"".join(parts)
    return status, await reader.readexactly(content_length or 0)


class EtcdCluster(Cluster):
    name = "etcd"
    label = "etcd"

    def __init__(self, value_bytes: int = 100, log: Callable[[str], None] = print) -> None:
        self.value_bytes = value_bytes
        self.log = log
        self.workdir: Path | None = None
        self.processes: list[ManagedProcess] = []
        self.client_ports: list[int] = []
        self.member_ids: list[str | None] = [None] * self.voters
        self._writer: _KeepAliveClient | None = None
        self._write_counter = 0
        self._failover_rotation = 0

    @classmethod
    def availability_problem(cls) -> str | None:
        if shutil.which("etcd") is None:
            return f"etcd not installed ({INSTALL_HINT})"
        return None

    # ---- lifecycle ------------------------------------------------------

    def start(self) -> None:
        etcd = shutil.which("etcd")
        if etcd is None:
            raise PeerUnavailable(INSTALL_HINT)
        self.workdir = make_temp_dir("etcd")
        ports = free_ports(2 * self.voters)
        self.client_ports = ports[: self.voters]
        peer_ports = ports[self.voters :]
        initial_cluster = ",".join(f"m{i}=http://{LOOPBACK}:{peer_ports[i]}" for i in range(self.voters))
        token = f"pykraft-bench-{int(time.time())}"
        for i in range(self.voters):
            client_url = f"http://{LOOPBACK}:{self.client_ports[i]}"
            peer_url = f"http://{LOOPBACK}:{peer_ports[i]}"
            argv = [
                etcd,
                "--name", f"m{i}",
                "--data-dir", str(self.workdir / f"m{i}.etcd"),
                "--listen-client-urls", client_url,
                "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", initial_cluster,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", token,
                "--logger", "zap",
                "--log-outputs", "stderr",
            ]  # fmt: skip
            self.processes.append(ManagedProcess(f"etcd-m{i}", argv, self.workdir / f"m{i}.log"))
        for process in self.processes:
            process.start()
        self.wait_healthy(60.0)
        for i, port in enumerate(self.client_ports):
            self.member_ids[i] = _http_post(port, "/v3/maintenance/status", b"{}", 5.0)["header"]["member_id"]

    def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for process in self.processes:
            process.terminate(grace_s=5.0)
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    def _status(self, index: int, timeout_s: float = 1.0) -> dict:
        return _http_post(self.client_ports[index], "/v3/maintenance/status", b"{}", timeout_s)

    def leader_index(self) -> int | None:
        for i in range(self.voters):
            if not self.processes[i].is_alive():
                continue
            try:
                status = self._status(i)
            except Exception:  # noqa: BLE001
                continue
            leader = status.get("leader")
            if leader and leader != "0" and leader in self.member_ids:
                return self.member_ids.index(leader)
        return None

    def wait_healthy(self, timeout_s: float) -> None:
        def all_agree() -> bool:
            leaders = {self._status(i).get("leader") for i in range(self.voters)}
            return len(leaders) == 1 and None not in leaders and "0" not in leaders

        wait_for(all_agree, timeout_s, "all etcd members to agree on a leader", 0.1, self.processes)

    def kill(self, index: int) -> None:
        self.processes[index].kill9()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def restart(self, index: int) -> None:
        self.processes[index].start()

    def rss_bytes(self) -> list[int | None]:
        return [process.rss_bytes() for process in self.processes]

    # ---- writes ---------------------------------------------------------

    def _leader_port(self) -> int:
        return self.client_ports[wait_for_leader(self, 30.0)]

    def _next_key(self) -> str:
        self._write_counter += 1
        return key_for(self._write_counter, KEY_SPACE)

    def write(self, value: bytes) -> None:
        if self._writer is None:
            self._writer = _KeepAliveClient(self._leader_port())
        self._writer.post("/v3/kv/put", _put_body(self._next_key(), value))

    def write_batch(self, values: Sequence[bytes]) -> None:
        if self._writer is None:
            self._writer = _KeepAliveClient(self._leader_port())
        base = self._write_counter
        self._write_counter += len(values)
        payload = json.loads(self._writer.post("/v3/kv/txn", _txn_body(base, values)))
        if len(payload.get("responses", [])) != len(values):
            raise RuntimeError(f"etcd txn answered {len(payload.get('responses', []))} responses")

    def write_many(self, values: Sequence[bytes], in_flight: int, deadline: float) -> list[float]:
        port = self._leader_port()
        base = self._write_counter
        self._write_counter += len(values)
        return asyncio.run(self._write_many_async(port, values, base, in_flight, deadline))

    async def _write_many_async(
        self, port: int, values: Sequence[bytes], base: int, in_flight: int, deadline: float
    ) -> list[float]:
        async def put(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(_post_request(port, "/v3/kv/put", _put_body(key_for(base + i, KEY_SPACE), values[i])))
            status, payload = await asyncio.wait_for(_read_http_response(reader), 30.0)
            if status != 200:
                raise RuntimeError(f"etcd put: HTTP {status} {payload[:200]!r}")

        return await timed_requests_on_connections(port, len(values), in_flight, deadline, put)

    def write_batches_concurrently(
        self, batches: Sequence[Sequence[bytes]], clients: int, deadline: float
    ) -> list[float]:
        port = self._leader_port()
        base = self._write_counter
        self._write_counter += sum(len(batch) for batch in batches)
        return asyncio.run(self._write_batches_async(port, batches, base, clients, deadline))

    async def _write_batches_async(
        self, port: int, batches: Sequence[Sequence[bytes]], base: int, clients: int, deadline: float
    ) -> list[float]:
        async def txn(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(_post_request(port, "/v3/kv/txn", _txn_body(base + i * len(batches[i]), batches[i])))
            status, payload = await asyncio.wait_for(_read_http_response(reader), 30.0)
            if status != 200:
                raise RuntimeError(f"etcd txn: HTTP {status} {payload[:200]!r}")
            if len(json.loads(payload).get("responses", [])) != len(batches[i]):
                raise RuntimeError("etcd txn answered the wrong number of responses")

        return await timed_requests_on_connections(port, len(batches), clients, deadline, txn)

    def try_write(self, value: bytes, timeout_s: float) -> bool:
        alive = [i for i in range(self.voters) if self.processes[i].is_alive()]
        self._failover_rotation += 1
        index = alive[self._failover_rotation % len(alive)]
        try:
            _http_post(self.client_ports[index], "/v3/kv/put", _put_body("bench/failover", value), timeout_s)
            return True
        except Exception:  # noqa: BLE001 - failover attempt
            return False

    def first_write_after_kill(self, killed_at: float, deadline: float) -> float | None:
        alive_ports = [self.client_ports[i] for i in range(self.voters) if self.processes[i].is_alive()]

        async def attempt(n: int) -> bool:
            port = alive_ports[n % len(alive_ports)]
            reader, writer = await asyncio.open_connection(LOOPBACK, port)
            try:
                body = _put_body("bench/failover", make_value(n, self.value_bytes, b"failover"))
                writer.write(
                    (
                        f"POST /v3/kv/put HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                    ).encode()
                    + body
                )
                status, _payload = await _read_http_response(reader)
                return status == 200
            finally:
                writer.close()

        return asyncio.run(hedged_first_success(attempt, killed_at, deadline))

    # ---- description ----------------------------------------------------

    def versions(self) -> dict[str, str]:
        return {
            "etcd": run_version_command(["etcd", "--version"]).replace("etcd Version: ", ""),
            "debian package etcd-server": debian_package_version("etcd-server") or "?",
            "client": "stdlib http.client/asyncio over the v3 JSON gateway",
        }

    def notes(self) -> list[str]:
        return [
            "etcd: fsync on (default): WAL fdatasync per raft Ready batch on leader and followers (group commit); "
            "heartbeat 100 ms, election timeout 1000 ms (defaults).",
            "etcd: seq = one keep-alive HTTP/1.1 connection to the leader, POST /v3/kv/put; "
            "64 in flight = 64 keep-alive connections to the leader on one asyncio loop; "
            "batch = one POST /v3/kv/txn with 100 puts (one raft entry).",
            "etcd: failover = from kill -9 of the leader, a new put every 20 ms on a fresh connection to the "
            "surviving members in turn, earlier ones kept waiting; time of the first 200 OK.",
        ]

    def log_dir(self) -> Path | None:
        return self.workdir
