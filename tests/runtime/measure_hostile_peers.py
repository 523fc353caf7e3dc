"""Before/after figures for issue 15's attacks (not a test: pytest does not
collect it). Runs against whichever tree PYTHONPATH names, so the same
script measures main and this branch::

    PYTHONPATH=/path/to/tree .venv/bin/python tests/runtime/measure_hostile_peers.py attacks
    PYTHONPATH=... .venv/bin/python tests/runtime/measure_hostile_peers.py flood [SECONDS]
    PYTHONPATH=... .venv/bin/python tests/runtime/measure_hostile_peers.py bombs

- ``attacks``: a forged VoteRequest at epoch 2**32 + 1 to a follower of 3
  in-process voters (add ``noforge`` to skip it: before the fix it crashes
  the run), then 60 connections each stalling a ~15 MiB partial frame at the
  leader (RSS growth), then 4 and 16 MiB msgpack bombs in a Fetch extension
  through the decoder (tracemalloc peak);
- ``flood``: one client pipelining proposals without reading, at the leader
  of 3 in-process voters, while another client proposes: its latencies,
  epoch changes, RSS growth;
- ``bombs``: 1 MiB bombs in a Fetch extension, decoded with a node's limits.
"""

import pathlib
import socket
import sys
import tempfile
import time
import tracemalloc

import msgpack
import trio

from quorum import VoteRequest
from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, open_quorum_node
from quorum.wire import FrameDecoder, ProposeRequest, decode_message, encode_message

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024

async def answer_or_close(stream):
    decoder = FrameDecoder()
    while True:
        p = decoder.next_frame()
        if p is not None:
            return decode_message(p, expected_cluster_id="pykraft").message
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return "reset"
        if not data:
            return "closed"
        decoder.feed(data)

async def attacks():
    tmp = pathlib.Path(tempfile.mkdtemp())
    socks = [socket.socket() for _ in range(3)]
    for s in socks: s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
    handles = [None] * 3
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        async def run(i, task_status=trio.TASK_STATUS_IGNORED):
            cfg = NodeConfig(node_id=i + 1, voters=voters, data_dir=tmp / str(i), quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 1500})
            async with open_quorum_node(cfg) as node:
                handles[i] = node
                task_status.started()
                await stop.wait()
        for i in range(3):
            await nursery.start(run, i)
        while not any(h.is_leader for h in handles):
            await trio.sleep(0.01)
        leader = next(h for h in handles if h.is_leader)
        follower = next(h for h in handles if h is not leader)
        # 1. forged epoch
        if "noforge" not in sys.argv:
            env = msgpack.unpackb(encode_message(VoteRequest(src=leader.node_id, dst=follower.node_id, epoch=1, last_epoch=1, end_offset=10**6, pre_vote=False), correlation_id=9, cluster_id="pykraft")[4:])
            env[4][2] = env[4][3] = 2**32 + 1
            payload = msgpack.packb(env)
            stream = await trio.open_tcp_stream("127.0.0.1", follower.listen_port)
            await stream.send_all(len(payload).to_bytes(4, "big") + payload)
            with trio.move_on_after(2):
                print("forged VoteRequest answered:", await answer_or_close(stream))
            await trio.sleep(0.5)
            print("follower epoch now", follower.runtime.node.epoch, "stored:", (tmp / str(follower.node_id - 1) / "quorum-state.json").read_text()[:120])
            await stream.aclose()
        # 2. stalled partial frames near 16 MiB, against the leader (60 connections)
        target = next(h for h in handles if h.is_leader) or leader
        rss0 = rss_mb()
        chunk = b"\x00" * (1 << 20)
        streams = []
        for _ in range(60):
            s = await trio.open_tcp_stream("127.0.0.1", target.listen_port)
            streams.append(s)
            try:
                await s.send_all((16 * 1024 * 1024 - 1).to_bytes(4, "big") + b"\x95\x07")
                with trio.move_on_after(1):
                    for _ in range(15):
                        await s.send_all(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.sleep(1)
        print(f"60 stalled ~15 MiB partial frames: RSS +{rss_mb() - rss0:.0f} MB")
        for s in streams:
            await s.aclose()
        stop.set()
        nursery.cancel_scope.cancel()


def bombs():
    head = msgpack.packb([7, 1, 1, "pykraft"])[1:]
    body = msgpack.packb([2, 1, 5, 0, 0, 1, 0])
    for size_mib in (4, 16):
        count = size_mib * 1024 * 1024 - 100
        bomb = b"\x95" + head + b"\x98" + body[1:] + b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count
        tracemalloc.start()
        try:
            decode_message(bomb, expected_cluster_id="pykraft")
            outcome = "accepted"
        except Exception as e:
            outcome = type(e).__name__
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{size_mib} MiB bomb in a Fetch extension (decoder defaults): {outcome}, tracemalloc peak {peak / 2**20:.0f} MiB")



async def flood(seconds):
    tmp = pathlib.Path(tempfile.mkdtemp())
    socks = [socket.socket() for _ in range(3)]
    for s in socks: s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
    handles = [None] * 3
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        async def run(i, task_status=trio.TASK_STATUS_IGNORED):
            cfg = NodeConfig(node_id=i + 1, voters=voters, data_dir=tmp / str(i), quorum={"election_timeout_ms": 300, "fetch_timeout_ms": 1500})
            async with open_quorum_node(cfg) as node:
                handles[i] = node
                task_status.started()
                await stop.wait()
        for i in range(3):
            await nursery.start(run, i)
        while not any(h.is_leader for h in handles):
            await trio.sleep(0.01)
        leader = next(h for h in handles if h.is_leader)
        epoch = leader.runtime.node.epoch
        rss0 = rss_mb()
        frame = encode_message(ProposeRequest(records=(KeyValueStateMachine.encode_put(b"flood", b"x" * 200),)), correlation_id=1, cluster_id="pykraft")
        flood = socket.create_connection(("127.0.0.1", leader.listen_port))
        flood.setblocking(False)
        sent = 0
        pending = b""
        latencies = []
        deadline = trio.current_time() + seconds
        t0 = time.perf_counter()
        epoch_changes = []
        async def watch():
            last = epoch
            while True:
                now = max(h.runtime.node.epoch for h in handles)
                if now != last:
                    epoch_changes.append((round(time.perf_counter() - t0, 1), now))
                    last = now
                await trio.sleep(0.01)
        nursery.start_soon(watch)
        async with QuorumClient([f"{leader.node_id}@127.0.0.1:{leader.listen_port}"], retry_timeout_s=30) as client:
            i = 0
            while trio.current_time() < deadline:
                try:
                    while True:
                        if not pending:
                            pending = frame * 64
                        n = flood.send(pending)
                        sent += n
                        pending = pending[n:]
                except BlockingIOError:
                    pass
                except OSError as e:
                    if not getattr(flood, "reset", False):
                        print(f"flood connection broken after {time.perf_counter() - t0:.1f} s: {e}")
                        flood.reset = True
                t = time.perf_counter()
                try:
                    with trio.fail_after(10):
                        await client.propose([KeyValueStateMachine.encode_put(b"k%d" % i, b"v")])
                except Exception as e:
                    print("good client failed:", type(e).__name__, e)
                latencies.append(time.perf_counter() - t)
                i += 1
        epochs = [h.runtime.node.epoch for h in handles]
        leaders = [h.node_id for h in handles if h.is_leader]
        latencies.sort()
        print(f"flood frames sent {sent // len(frame)}, leader applied offset {leader.runtime.applied_offset}")
        print(f"good client: {len(latencies)} proposals, p50 {latencies[len(latencies)//2]*1000:.0f} ms, max {latencies[-1]*1000:.0f} ms")
        print(f"epoch before {epoch}, after {epochs}, leaders now {leaders} (was {leader.node_id}), resignations {leader.runtime.metrics.resignations}")
        print("epoch changes (s, epoch):", epoch_changes)
        print(f"RSS growth {rss_mb() - rss0:.0f} MB")
        flood.close()
        stop.set()
        nursery.cancel_scope.cancel()



def small_bombs():
    from quorum.wire import decode_message
    try:
        from quorum.wire import NODE_LIMITS as L
    except ImportError:
        from quorum.wire import DEFAULT_LIMITS as L
    head = msgpack.packb([7, 1, 1, "pykraft"])[1:]
    body = msgpack.packb([2, 1, 5, 0, 0, 1, 0])
    for name, item in [("empty maps", b"\x80"), ("empty arrays", b"\x90"), ("2-char strings", b"\xa2ab"), ("one-item arrays", b"\x91\x00")]:
        count = (1024 * 1024 - 100) // len(item)
        bomb = b"\x95" + head + b"\x98" + body[1:] + b"\xdd" + count.to_bytes(4, "big") + item * count
        tracemalloc.start()
        try:
            decode_message(bomb, expected_cluster_id="pykraft", limits=L); outcome = "accepted"
        except Exception as e:
            outcome = type(e).__name__
        peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        print(f"1 MiB Fetch-extension bomb of {name}: {outcome}, peak {peak/2**20:.1f} MiB ({peak/len(bomb):.0f}x)")


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "attacks"
    if command == "attacks":
        trio.run(attacks)
        bombs()
    elif command == "flood":
        trio.run(flood, float(sys.argv[2]) if len(sys.argv) > 2 else 10.0)
    elif command == "bombs":
        small_bombs()
    else:
        sys.exit(f"unknown command {command!r}: attacks, flood or bombs")
