"""A prototype author's first mistakes meet a clear error at the edge, not
a node that stops, hangs or logs a traceback from deep inside: a state
machine whose callbacks return the wrong type or are ``async def``, a
config of the wrong shape, a node used after its block ended, a
replicated method that calls another one. One in-memory voter on
loopback, MockClock; the facade tests start real nodes briefly."""

from __future__ import annotations

import logging
import socket

import pytest
import trio

from quorum import ApplyFailedError
from quorum.client import QuorumClient, QuorumClientError
from quorum.replicated import Replicated, query, replicated
from quorum.runtime import NodeConfig, open_quorum_node

QUICK_TIMERS = {"election_timeout_ms": 200, "fetch_timeout_ms": 400, "fetch_max_wait_ms": 100}


def one_voter(**options):
    return NodeConfig(node_id=1, voters={1: ("127.0.0.1", 0)}, plaintext=True, quorum=QUICK_TIMERS, **options)


class Counting:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, entries):
        self.applied += len(entries)
        return None

    def snapshot(self) -> bytes:
        return str(self.applied).encode()

    def restore(self, data: bytes) -> None:
        self.applied = int(data)


class AnswersText(Counting):
    def apply(self, entries):
        super().apply(entries)
        return {entry.offset: "ok" for entry in entries}  # str, not bytes


class ReturnsText(Counting):
    def apply(self, entries):
        super().apply(entries)
        return "ok"


class SnapshotsNothing(Counting):
    def snapshot(self):
        return None


class AsyncApply(Counting):
    async def apply(self, entries):
        return None


async def test_an_apply_that_answers_the_wrong_type_fails_its_record_not_the_node(autojump_clock, caplog):
    for machine in (AnswersText(), ReturnsText()):
        async with open_quorum_node(one_voter(), machine) as node:
            await node.wait_for_leader()
            with caplog.at_level(logging.ERROR, logger="pykraft.quorum"):
                with pytest.raises(ApplyFailedError, match="TypeError: apply\\(\\) (answered a str|returned a str)"):
                    await node.propose([b"a"])
                # A client's write over TCP: its answer would not encode on
                # the wire; before, the node stopped there.
                async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=5) as client:
                    with pytest.raises(QuorumClientError, match="TypeError: apply"):
                        await client.propose([b"b"])
            assert machine.applied == 2  # both records applied: only their answers failed
            assert node.statistics()["role"] == "leader"  # still serving


async def test_a_snapshot_that_is_not_bytes_is_skipped_and_the_node_goes_on(autojump_clock, caplog):
    with caplog.at_level(logging.ERROR, logger="pykraft.quorum"):
        async with open_quorum_node(one_voter(snapshot_every_records=2), SnapshotsNothing()) as node:
            await node.wait_for_leader()
            for _ in range(5):
                await node.propose([b"x"])
            assert node.statistics()["log_start_offset"] == 0  # no snapshot taken, the log kept
            assert node.runtime.host.snapshot_failures >= 1
    assert any("snapshot() returned None, not bytes" in record.getMessage() for record in caplog.records)


async def test_an_async_state_machine_is_refused_before_the_node_opens(tmp_path):
    with pytest.raises(TypeError, match=r"AsyncApply.apply\(\) is async: .* plain \(def\) methods"):
        async with open_quorum_node(one_voter(data_dir=tmp_path / "node1"), AsyncApply()):
            pass
    assert not (tmp_path / "node1").exists()  # nothing was opened
    with pytest.raises(TypeError, match=r"object has no apply\(\) method"):
        async with open_quorum_node(one_voter(), object()):
            pass
    # Before: every record failed with "apply() missing 1 required positional argument".
    with pytest.raises(TypeError, match=r"must be an instance \(Counting\(\)\), not the class Counting"):
        async with open_quorum_node(one_voter(), Counting):
            pass


async def test_a_closed_node_says_so_instead_of_hanging(autojump_clock):
    async with open_quorum_node(one_voter()) as node:
        await node.wait_for_leader()
    assert not node.is_leader
    with trio.fail_after(5):  # before: wait_for_leader and read waited forever
        with pytest.raises(RuntimeError, match="node 1 is closed"):
            await node.wait_for_leader()
        with pytest.raises(RuntimeError, match="node 1 is closed"):
            await node.read("linearizable")
        with pytest.raises(RuntimeError, match="node 1 is closed"):  # before: NotLeaderError, hint None
            await node.propose([b"x"])


async def test_a_port_in_use_raises_oserror_not_nested_exception_groups():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        config = NodeConfig(node_id=1, voters={1: busy.getsockname()}, plaintext=True)
        with pytest.raises(OSError):
            async with open_quorum_node(config):
                pass


def test_a_node_config_of_the_wrong_shape_is_refused_by_name():
    def config(**fields):
        return NodeConfig(**{"node_id": 1, "voters": {1: ("127.0.0.1", 9091)}, "plaintext": True, **fields})

    with pytest.raises(TypeError, match="node_id must be an int"):
        config(node_id="1")  # before: "node 1 is not a voter, so it needs a listen address"
    with pytest.raises(TypeError, match="voters must be a dict"):
        config(voters=[("127.0.0.1", 9091)])
    with pytest.raises(ValueError, match=r"voter 1's address must be \(host, port\), got '127.0.0.1:9091'"):
        config(voters={1: "127.0.0.1:9091"})  # before: "too many values to unpack"
    with pytest.raises(ValueError, match="voter 1's port must be an int in 0-65535, got 70000"):
        config(voters={1: ("127.0.0.1", 70000)})
    with pytest.raises(ValueError, match=r"node 4 is not among the voters \(1\)"):
        config(node_id=4)
    with pytest.raises(ValueError, match="snapshot_every_records must be an int >= 0"):
        config(snapshot_every_records=-1)  # before: a snapshot after every output
    with pytest.raises(TypeError, match="fsync must be True or False, got 'no'"):
        config(fsync="no")  # before: accepted, and meant fsync on
    with pytest.raises(ValueError, match=r"the listen address must be \(host, port\)"):
        config(listen="127.0.0.1:9091")
    with pytest.raises(ValueError, match="the metrics_listen port must be an int in 0-65535"):
        config(metrics_listen=("127.0.0.1", 99999))
    with pytest.raises(ValueError, match="retention_ms must be an int >= 0 or None"):
        config(retention_ms="7d")
    for cluster_id in ("", "x" * 256, 5):  # before: a node that never reached its peers
        with pytest.raises(ValueError, match="cluster_id must be a non-empty str"):
            config(cluster_id=cluster_id)


class Counter(Replicated):
    def __init__(self) -> None:
        self.total = 0

    @replicated
    def add(self, n):
        self.total += n
        return self.total

    @replicated
    def add_twice(self, n):
        self.add(n)  # a first mistake: a replicated method calling another one
        return self.add(n)

    @replicated
    def shut_down(self):
        self.close()  # another: it would leave the node running, unclosable

    @query
    def value(self):
        return self.total


def test_replicated_start_refuses_bad_arguments_by_name():
    counter = Counter()
    with pytest.raises(ValueError, match="timeout_s must be a positive, finite number"):
        counter.start(node_id=1, voters="1@127.0.0.1:1", plaintext=True, timeout_s=float("nan"))
    with pytest.raises(TypeError, match="timeout_s must be a number of seconds"):
        counter.start(node_id=1, voters="1@127.0.0.1:1", plaintext=True, timeout_s="10")
    with pytest.raises(TypeError, match="forward must be True or False"):
        counter.start(node_id=1, voters="1@127.0.0.1:1", plaintext=True, forward="no")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError):  # as documented; before: an ExceptionGroup
            counter.start(node_id=1, voters=f"1@127.0.0.1:{busy.getsockname()[1]}", plaintext=True)
    with pytest.raises(RuntimeError, match="not started"):
        counter.add(1)


def test_a_replicated_method_calling_another_fails_with_a_clear_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Counter().start(node_id=1, voters=f"1@127.0.0.1:{port}", plaintext=True, quorum=QUICK_TIMERS) as counter:
        counter.wait_for_leader(timeout_s=30)
        with pytest.raises(ValueError, match="timeout_s must be a positive"):
            counter.wait_for_leader(timeout_s=-1)
        # Before: "RuntimeError: this is a blocking function; call it from a thread".
        with pytest.raises(ApplyFailedError, match=r"add\(\) was called from inside add_twice\(\)"):
            counter.add_twice(1)
        assert counter.add(2) == 2  # nothing of add_twice took effect; the node goes on
        with pytest.raises(ApplyFailedError, match=r"close\(\) was called from inside shut_down\(\)"):
            counter.shut_down()
        assert counter.value() == 2  # still started: close() refused


def leaves(error):
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


class RestoresNothing(Counting):
    def restore(self, data: bytes) -> None:
        raise ValueError("cannot restore")


async def test_a_restore_that_raises_stops_the_node_saying_why(autojump_clock, caplog):
    # A follower cut off while the leader snapshots and drops its log must
    # install the leader's snapshot; its restore() raises, so its state is
    # unknown: it stops, with one line naming the cause.
    import random

    from quorum import QuorumConfig
    from quorum.runtime import MemoryNetwork, QuorumRuntime
    from quorum.storage import MemoryStorage

    network = MemoryNetwork()
    runtimes = {}
    stopped = {}

    async def run(runtime):
        try:
            await runtime.run()
        except* ValueError as group:  # the user's own error, as it is
            stopped[runtime.config.node_id] = group

    async with trio.open_nursery() as nursery:
        for node_id in (1, 2, 3):
            runtime = QuorumRuntime(
                QuorumConfig(node_id=node_id, voters=(1, 2, 3), snapshot_retained_records=1),
                RestoresNothing() if node_id == 3 else Counting(),
                storage=MemoryStorage(),
                transport=network.transport(node_id),
                rng=random.Random(node_id),
                snapshot_every_records=5,
            )
            runtimes[node_id] = runtime
            nursery.start_soon(run, runtime)
        with trio.fail_after(60):
            while not runtimes[1].node.leader_has_committed_own_epoch and not runtimes[2].node.leader_has_committed_own_epoch:
                await trio.sleep(0.01)
                if runtimes[3].node.is_leader:
                    await runtimes[3].resign()
            leader = next(runtimes[n] for n in (1, 2) if runtimes[n].node.leader_has_committed_own_epoch)
            network.isolate(3, [1, 2])
            with caplog.at_level(logging.CRITICAL, logger="pykraft.quorum"):
                for _ in range(20):
                    await leader.propose([b"x"])
                network.heal()
                while 3 not in stopped:
                    await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert [str(error) for error in leaves(stopped[3])] == ["cannot restore"]
    [line] = [record.getMessage() for record in caplog.records if "restore() raised" in record.getMessage()]
    assert line.startswith("node 3: the state machine's restore() raised loading the snapshot of offsets below ")
    assert line.endswith("(ValueError: cannot restore): its state is unknown, so the node stops")


def test_an_async_replicated_method_is_refused_where_it_is_declared():
    with pytest.raises(TypeError, match=r"@replicated cannot mark .*add\(\), an async def"):

        class AsyncCounter(Replicated):
            @replicated
            async def add(self, n):
                return n

    with pytest.raises(TypeError, match=r"@query cannot mark .*value\(\), an async def"):

        class AsyncReader(Replicated):
            @query
            async def value(self):
                return 0


class QueriesBadly(Counting):
    def query(self, request: bytes):
        if request == b"text":
            return "text"
        raise KeyError(request)


async def test_a_query_that_raises_or_answers_text_is_named_to_the_client():
    async with open_quorum_node(one_voter(), QueriesBadly()) as node:
        with trio.fail_after(30):
            await node.wait_for_leader()
        async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=5) as client:
            # Before: "INVALID_REQUEST: b'k'", the bare text of the KeyError.
            with pytest.raises(QuorumClientError, match=r"QueriesBadly.query\(\) raised KeyError: b'k'"):
                await client.read(b"k")
            with pytest.raises(QuorumClientError, match=r"QueriesBadly.query\(\) answered a str"):
                await client.read(b"text")
            await client.propose([b"x"])  # the node goes on


def test_a_result_too_large_for_an_answer_fails_alike_instead_of_never_arriving():
    # Forwarded from a follower, a 40 MiB result could not be sent back:
    # the caller waited out its timeout (NoAnswerError, TimeoutError for a
    # query). It fails at the source now, the same on every replica.
    import msgpack

    from quorum import Entry, RecordKind
    from quorum.replicated import RESULT_BYTES_MAX, ReplicatedStateMachine, encode_call

    class Blob(Replicated):
        def __init__(self) -> None:
            self.calls = 0

        @replicated
        def make(self, size):
            self.calls += 1
            return b"x" * size

        @query
        def peek(self, size):
            return b"y" * size

    machine = ReplicatedStateMachine(Blob())
    calls = [encode_call("make", [RESULT_BYTES_MAX], {}), encode_call("make", [10], {})]
    answers = machine.apply([Entry(offset=offset, epoch=1, kind=RecordKind.DATA, data=data) for offset, data in enumerate(calls)])
    failed, description = msgpack.unpackb(answers[0], raw=False)
    assert failed == 1 and description.startswith("ValueError: the result encodes to ")
    assert description.endswith(f"over the limit of {RESULT_BYTES_MAX} an answer may carry")
    assert msgpack.unpackb(answers[1], raw=False) == [0, b"x" * 10]
    assert machine.target.calls == 2  # the call ran (as a method that raises at its end)
    failed, _ = msgpack.unpackb(machine.query(encode_call("peek", [RESULT_BYTES_MAX], {})), raw=False)
    assert failed == 1


async def test_a_quorum_client_misused_says_how_to_use_it():
    with pytest.raises(TypeError, match=r"bootstrap must be a list of servers, not a str: give \['1@127.0.0.1:9091'\]"):
        QuorumClient("1@127.0.0.1:9091")  # before: "bad bootstrap server '1'"
    # Before: one server whose host was "127.0.0.1:9091,127.0.0.1" (never
    # reached), a bare AttributeError, and node 1 at two addresses.
    with pytest.raises(ValueError, match=r"one server per item, give \['127.0.0.1:9091', '127.0.0.1:9092'\]"):
        QuorumClient(["127.0.0.1:9091,127.0.0.1:9092"])
    with pytest.raises(TypeError, match=r"bootstrap server \('127.0.0.1', 9091\) must be a str"):
        QuorumClient([("127.0.0.1", 9091)])
    with pytest.raises(ValueError, match="node 1 is given another address before it"):
        QuorumClient(["1@127.0.0.1:9091", "1@127.0.0.1:9092"])
    with pytest.raises(ValueError, match="request_timeout_s must be a positive, finite number"):
        QuorumClient(["1@127.0.0.1:9091"], request_timeout_s=float("nan"))  # before: every request hung
    with pytest.raises(ValueError, match="cluster_id must be a non-empty str"):
        QuorumClient(["1@127.0.0.1:9091"], cluster_id="")
    client = QuorumClient(["1@127.0.0.1:9"])
    with trio.fail_after(5):
        with pytest.raises(RuntimeError, match="not open: use it as `async with QuorumClient"):
            await client.propose([b"x"])  # before: a bare AssertionError
        async with client:
            pass
        with pytest.raises(RuntimeError, match="not open"):
            await client.read(b"k")  # before: trio's "Nursery is closed to new arrivals"


class AnswersTooMuch(Counting):
    """Answers more than one answer frame can carry: a read's answer, a
    record's, or a batch's together."""

    def apply(self, entries):
        super().apply(entries)
        return {entry.offset: b"a" * int(entry.data) for entry in entries}

    def query(self, request: bytes):
        return b"q" * int(request)


async def test_an_answer_too_large_for_the_wire_fails_at_once_naming_its_size(autojump_clock, caplog):
    # Before: the node could not encode the answer, logged that and sent
    # nothing; the client waited out its timeout (NoAnswerError) and, for a
    # read, asked again until its retry timeout.
    from quorum import RESULT_BYTES_MAX
    from quorum.wire import FRAME_BYTES_MAX

    assert RESULT_BYTES_MAX < FRAME_BYTES_MAX  # room for the frame's other fields
    too_large = FRAME_BYTES_MAX + 1
    half = FRAME_BYTES_MAX // 2 + 1  # fits on its own, not twice in one ProposeResponse
    async with open_quorum_node(one_voter(), AnswersTooMuch()) as node:
        await node.wait_for_leader()
        async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=5) as client:
            limit = f"over the limit of {RESULT_BYTES_MAX} an answer may carry"
            with pytest.raises(QuorumClientError, match=rf"AnswersTooMuch.query\(\) answered {too_large} bytes, {limit}"):
                await client.read(b"%d" % too_large)
            with pytest.raises(QuorumClientError, match=rf"apply\(\) answered {too_large} bytes for offset \d+, {limit}"):
                await client.propose([b"%d" % too_large])
            with pytest.raises(QuorumClientError, match=rf"answered {2 * half} bytes for offsets \d+\.\.\d+, {limit}"):
                await client.propose([b"%d" % half] * 2)
            assert await client.read(b"3") == (node.runtime.applied_offset, b"qqq")  # the node goes on
        # The same for a proposer in the node's own process: the records
        # took effect, their answers are dropped.
        with pytest.raises(ApplyFailedError, match="the records took effect"):
            await node.propose_with_answers([b"%d" % too_large])
        assert node.state_machine.applied == 4
    assert not [record for record in caplog.records if "cannot encode" in record.getMessage()]


class QueriesFailing(Counting):
    def query(self, request: bytes):
        raise KeyError(request)


async def test_a_query_that_keeps_raising_logs_its_traceback_once_then_counts(autojump_clock, caplog):
    # Before: a traceback (two, chained) for every read, so a client
    # retrying a failing read flooded the node's log.
    async with open_quorum_node(one_voter(), QueriesFailing()) as node:
        await node.wait_for_leader()
        async with QuorumClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=5) as client:
            with caplog.at_level(logging.ERROR):
                for _ in range(10):
                    with pytest.raises(QuorumClientError, match=r"QueriesFailing.query\(\) raised KeyError"):
                        await client.read(b"k")
    lines = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert [record.exc_info is not None for record in lines] == [True, False, False, False]  # at 1, 2, 4 and 8
    assert all("QueriesFailing.query() raised KeyError: b'k'" in record.getMessage() for record in lines)
    assert lines[-1].getMessage().endswith("(8 times so far; logged each time the count doubles, with the traceback the first time)")
    # A @query method of a replicated object, read by followers or clients
    # through the leader: before, one ERROR line per read.
    from quorum.replicated import ReplicatedStateMachine, encode_call

    class Lookup(Replicated):
        @query
        def find(self, key):
            raise KeyError(key)

    machine = ReplicatedStateMachine(Lookup())
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="pykraft.replicated"):
        for _ in range(5):
            machine.query(encode_call("find", ["k"], {}))
    assert [record.exc_info is not None for record in caplog.records] == [True, False, False]  # at 1, 2 and 4


async def test_a_query_that_raises_on_the_leader_is_a_failed_query_not_a_failed_apply(autojump_clock):
    # Before: ApplyFailedError, "applying the record at offset N failed", for
    # a read that applied nothing. Still an ApplyFailedError for callers
    # that catch that.
    from quorum import QueryFailedError
    from quorum.replicated import ReplicatedClient, ReplicatedStateMachine

    class Lookup(Replicated):
        def __init__(self) -> None:
            self.items = {}

        @replicated
        def put(self, key, value):
            self.items[key] = value

        @query
        def find(self, key):
            return self.items[key]

    async with open_quorum_node(one_voter(), ReplicatedStateMachine(Lookup())) as node:
        await node.wait_for_leader()
        async with ReplicatedClient([f"1@127.0.0.1:{node.listen_port}"], retry_timeout_s=5) as client:
            await client.call("put", "a", 1)
            assert await client.query("find", "a") == 1
            with pytest.raises(QueryFailedError, match=r"^the query read at offset \d+ failed: KeyError: 'b'$") as failed:
                await client.query("find", "b")
            assert isinstance(failed.value, ApplyFailedError) and failed.value.description == "KeyError: 'b'"
            with pytest.raises(QueryFailedError, match="the query was not a call this object knows"):
                await client.query("missing")
