"""Three voters in one trio run, on real sockets and files: the replication
path as a process runs it (frames written without a task hop, a follower
persisting inline, the leader's persister task, proposals answered from the
core task), and the client's pipelining across a change of node."""

import socket

import trio

from quorum.client import QuorumClient
from quorum.runtime import KeyValueStateMachine, NodeConfig, StreamWriter, open_quorum_node
from quorum.wire import encode_message
from loopback import free_ports



def voter_configs(tmp_path) -> list[NodeConfig]:
    ports = free_ports(3)
    voters = {node_id: ("127.0.0.1", port) for node_id, port in zip((1, 2, 3), ports)}
    return [
        NodeConfig(
            node_id=node_id,
            voters=voters,
            data_dir=tmp_path / f"node{node_id}",
            quorum={"election_timeout_ms": 200, "fetch_timeout_ms": 1000},
            plaintext=True,
        )
        for node_id in voters
    ]


async def three_voters(nursery: trio.Nursery, tmp_path) -> list:
    configs = voter_configs(tmp_path)
    handles: list = [None] * 3
    stop = trio.Event()

    async def run(index: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with open_quorum_node(configs[index]) as node:
            handles[index] = node
            task_status.started()
            await stop.wait()

    for index in range(3):
        await nursery.start(run, index)
    with trio.fail_after(20):
        leader_id = await handles[0].wait_for_leader()
        while not handles[leader_id - 1].is_leader:
            await trio.sleep(0.01)
    return [handles, configs, stop]


def bootstrap(configs: list[NodeConfig], first: int) -> list[str]:
    """Client bootstrap entries, starting with node ``first``."""
    ordered = sorted(configs, key=lambda config: config.node_id != first)
    return [f"{config.node_id}@127.0.0.1:{config.listen[1]}" for config in ordered]


async def test_pipelined_proposals_sent_to_a_follower_all_commit_at_the_leader(tmp_path):
    """64 proposals in flight on one connection to a follower: each is
    turned away with NOT_LEADER, and the first such answer must not cut the
    connection under the 63 others (they would become indeterminate)."""
    async with trio.open_nursery() as nursery:
        handles, configs, stop = await three_voters(nursery, tmp_path)
        leader = next(handle for handle in handles if handle.is_leader)
        follower = next(handle for handle in handles if not handle.is_leader)
        offsets: list[int] = []
        async with QuorumClient(bootstrap(configs, follower.node_id)) as client:

            async def one(index: int) -> None:
                offsets.append(await client.propose([KeyValueStateMachine.encode_put(b"k%d" % index, b"v")]))

            with trio.fail_after(30):
                async with trio.open_nursery() as writers:
                    for index in range(64):
                        writers.start_soon(one, index)
        assert len(set(offsets)) == 64
        # Every voter holds every record: replication reached both
        # followers, and a follower learns the high watermark with the next
        # records or its long poll's expiry.
        last = max(offsets)
        with trio.fail_after(10):
            while any(handle.runtime.applied_offset <= last for handle in handles):
                await trio.sleep(0.05)
        for handle in handles:
            assert handle.state_machine.get(b"k63")[0] == b"v"
        assert leader.is_leader
        stop.set()


async def test_a_batch_commits_and_every_voter_stores_the_same_records(tmp_path):
    async with trio.open_nursery() as nursery:
        handles, configs, stop = await three_voters(nursery, tmp_path)
        leader = next(handle for handle in handles if handle.is_leader)
        records = [KeyValueStateMachine.encode_put(b"b%03d" % index, b"x" * 100) for index in range(100)]
        async with QuorumClient(bootstrap(configs, leader.node_id)) as client:
            with trio.fail_after(20):
                first = await client.propose(records)
                await client.propose([KeyValueStateMachine.encode_put(b"after", b"1")])
        with trio.fail_after(10):
            while any(handle.runtime.applied_offset <= first + 100 for handle in handles):
                await trio.sleep(0.05)
        logs = [list(handle.runtime.storage.entries_from(first)) for handle in handles]
        assert [entry.data for entry in logs[0][:100]] == records
        assert logs[0] == logs[1] == logs[2]
        stop.set()


async def test_stream_writer_keeps_bytes_in_order_when_the_kernel_buffer_fills():
    """What the kernel does not take at once is queued and sent by ``run``;
    writes made meanwhile go behind it, never ahead."""
    left, right = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(left), trio.SocketStream(right)
    writer = StreamWriter(sender)
    chunks = [bytes([index % 251]) * 50_000 for index in range(200)]  # 10 MB: far over a socket buffer
    for chunk in chunks:
        writer.write(chunk)
    assert writer.pending_bytes > 0
    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        with trio.fail_after(20):
            while len(received) < sum(map(len, chunks)):
                received += await receiver.receive_some(1 << 20)
        writer.close()
    assert bytes(received) == b"".join(chunks)
    await sender.aclose()
    await receiver.aclose()


async def test_messages_sent_during_a_batch_leave_at_its_end_in_order():
    """What the runtime sends while it runs its core is held per connection
    and written as one at ``end_batch``: nothing leaves before, nothing is
    lost or reordered after."""
    from quorum import VoteRequest
    from quorum.runtime import TcpTransport

    ports = free_ports(2)
    voters = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    sender = TcpTransport(1, cluster_id="batch", listen=voters[1], peer_addresses=voters)
    receiver = TcpTransport(2, cluster_id="batch", listen=voters[2], peer_addresses=voters)
    received: list = []

    def vote(epoch: int) -> VoteRequest:
        return VoteRequest(src=1, dst=2, epoch=epoch, last_epoch=0, end_offset=0, pre_vote=True)

    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.run, received.append, lambda peer: None)
        await nursery.start(sender.run, lambda message: None, lambda peer: None)
        with trio.fail_after(20):
            sender.send(vote(1))  # queued until the link is up, then written
            while not received:
                await trio.sleep(0.01)
            sender.begin_batch()
            for epoch in range(2, 202):
                sender.send(vote(epoch))
            for _ in range(50):
                await trio.lowlevel.checkpoint()
            assert [message.epoch for message in received] == [1], "held until the batch ends"
            sender.end_batch()
            while len(received) < 201:
                await trio.sleep(0.01)
        assert [message.epoch for message in received] == list(range(1, 202))
        nursery.cancel_scope.cancel()


async def test_the_frame_size_of_a_delivered_message_is_told_while_it_is_delivered():
    """The runtime bounds brokers' waiting messages in bytes by the frames
    they came in: TcpTransport says each one's size while ``deliver`` runs
    (``delivering_frame_bytes``), and 0 outside."""
    from quorum import FetchRequest
    from quorum.runtime import TcpTransport
    from quorum.wire import encode_message

    ports = free_ports(2)
    voters = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    sender = TcpTransport(1, cluster_id="sizes", listen=voters[1], peer_addresses=voters)
    receiver = TcpTransport(2, cluster_id="sizes", listen=voters[2], peer_addresses=voters)
    told: list[tuple[int, int]] = []
    fetches = [
        FetchRequest(src=1, dst=2, epoch=3, fetch_offset=0, last_fetched_epoch=0, request_id=1),
        FetchRequest(src=1, dst=2, epoch=3, fetch_offset=0, last_fetched_epoch=0, request_id=2,
                     extension={"padding": b"x" * 50_000}),
    ]  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.run, lambda message: told.append((message.request_id, receiver.delivering_frame_bytes)), lambda peer: None)
        await nursery.start(sender.run, lambda message: None, lambda peer: None)
        with trio.fail_after(20):
            for fetch in fetches:
                sender.send(fetch)
            while len(told) < 2:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    # The frame's payload: the whole frame less its 4-byte length prefix.
    expected = [(f.request_id, len(encode_message(f, correlation_id=1, cluster_id="sizes")) - 4) for f in fetches]
    assert [(request_id, size // 100) for request_id, size in told] == [(r, size // 100) for r, size in expected]
    assert told[1][1] > 50_000 and receiver.delivering_frame_bytes == 0


async def test_a_large_frame_is_decoded_and_handled_with_the_collector_paused():
    """A Fetch answer of 5,000 records (a frame over
    ``COLLECTOR_PAUSE_FRAME_BYTES_MIN``) reaches the runtime with the cyclic
    collector paused, a small one with it running, and it runs again after
    both; a collector someone else disabled stays disabled."""
    import gc

    from quorum import Entry, FetchRequest, FetchResponse, RecordKind
    from quorum.runtime import TcpTransport
    from quorum.runtime._tcp import COLLECTOR_PAUSE_FRAME_BYTES_MIN

    ports = free_ports(2)
    voters = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    leader = TcpTransport(1, cluster_id="pause", listen=voters[1], peer_addresses=voters)
    follower = TcpTransport(2, cluster_id="pause", listen=voters[2], peer_addresses=voters)
    fetches: list = []
    answers: list = []  # (records, collector enabled while delivered)
    records = tuple(Entry(offset, 1, RecordKind.DATA, b"x" * 30) for offset in range(5_000))

    def answer(records: tuple) -> FetchResponse:
        return FetchResponse(src=1, dst=2, epoch=1, request_id=1, leader_id=1, high_watermark=0, records=records)

    async def exchange(records: tuple) -> None:
        # A large Fetch answer is read only on a connection this node
        # fetched through, shortly after its Fetch: ask, then answer.
        fetches.clear()
        follower.send(FetchRequest(src=2, dst=1, epoch=1, fetch_offset=0, last_fetched_epoch=0, request_id=1))
        while not fetches:
            await trio.sleep(0.01)
        count = len(answers)
        leader.send(answer(records))
        while len(answers) == count:
            await trio.sleep(0.01)

    assert gc.isenabled()
    async with trio.open_nursery() as nursery:
        await nursery.start(leader.run, fetches.append, lambda peer: None)
        await nursery.start(
            follower.run, lambda message: answers.append((len(message.records), gc.isenabled())), lambda peer: None
        )
        with trio.fail_after(20):
            await exchange(records)
            await exchange(records[:10])
            gc.disable()
            try:
                await exchange(records)
                assert not gc.isenabled()
            finally:
                gc.enable()
        nursery.cancel_scope.cancel()
    assert answers == [(5_000, False), (10, True), (5_000, False)]
    assert len(encode_message(answer(records), correlation_id=1, cluster_id="pause")) > COLLECTOR_PAUSE_FRAME_BYTES_MIN
    assert gc.isenabled()


async def test_the_kernel_takes_a_large_fetch_answer_to_a_voter_whole():
    """A 400 KiB Fetch answer written on a link to another voter is handed
    to the kernel at once (nothing kept back for the event loop to write
    later), although the follower has read none of it: so a leader's own
    write and fsync of the batch, which hold its loop, do not hold back the
    followers' copies (trio's 16 KiB TCP_NOTSENT_LOWAT kept ~300 KiB of it
    back)."""
    from quorum import Entry, FetchRequest, FetchResponse, RecordKind
    from quorum.runtime import TcpTransport

    ports = free_ports(2)
    voters = {1: ("127.0.0.1", ports[0]), 2: ("127.0.0.1", ports[1])}
    leader = TcpTransport(1, cluster_id="unsent", listen=voters[1], peer_addresses=voters)
    follower = TcpTransport(2, cluster_id="unsent", listen=voters[2], peer_addresses=voters)
    fetches: list = []
    answers: list = []
    records = tuple(Entry(offset, 1, RecordKind.DATA, b"x" * 33) for offset in range(10_000))
    answer = FetchResponse(src=1, dst=2, epoch=1, request_id=1, leader_id=1, records=records)
    assert len(encode_message(answer, correlation_id=1, cluster_id="unsent")) > 400 * 1024
    async with trio.open_nursery() as nursery:
        await nursery.start(leader.run, fetches.append, lambda peer: None)
        await nursery.start(follower.run, answers.append, lambda peer: None)
        with trio.fail_after(20):
            follower.send(FetchRequest(src=2, dst=1, epoch=1, fetch_offset=0, last_fetched_epoch=0, request_id=1))
            while not fetches or 2 not in leader._links:
                await trio.sleep(0.01)
            leader.send(answer)  # no checkpoint between this and the check
            assert leader._links[2].writer.pending_bytes == 0
            while not answers:
                await trio.sleep(0.01)
        assert answers[0].records == records
        nursery.cancel_scope.cancel()
