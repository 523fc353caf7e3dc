"""Replicated objects: an ordinary Python class, replicated over a quorum.

::

    from quorum.replicated import Replicated, query, replicated

    class Counter(Replicated):
        def __init__(self):
            self.total = 0

        @replicated
        def add(self, n):
            self.total += n
            return self.total

        @query
        def value(self):
            return self.total

    counter = Counter().start(node_id=1, voters="1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093", plaintext=True)
    counter.add(5)        # blocks until committed; returns what add returned on the leader
    counter.value()       # a linearizable read

A call to a ``@replicated`` method is encoded (method name and arguments,
msgpack), proposed, and returns once committed: every replica then runs the
method on its own copy, in log order. Calls are synchronous and safe from
any thread (the node runs a trio loop on a thread of its own); from asyncio,
``await asyncio.to_thread(counter.add, 5)``.

A call on a follower is forwarded to the leader (``QuorumClient``), unless
the object was started with ``forward=False``: it then raises
``NotLeaderError`` carrying the leader hint. ``@query`` methods read
linearizably by default (ReadIndex, at the leader); ``read="leader-local"``
answers from the leader's own state, ``read="follower"`` from this node's
state as it is (possibly stale).

Snapshots hold the object's public attributes (msgpack); override
``snapshot_state()`` and ``restore_state(state)`` for anything else.

Bad input fails in the caller, before anything is proposed: arguments that
msgpack cannot encode raise ``TypeError``, a call larger than
``quorum.runtime.PROPOSAL_BYTES_MAX`` (just under 1 MiB: what a
forwarded call may carry) ``ValueError``. An exception raised by a replicated
method is contained: every replica logs it and goes on, and the caller gets
``ApplyFailedError`` naming the exception. The state must stay msgpack-able
(snapshots are its encoding): ``start()`` raises ``TypeError`` when it is
not, and a call that leaves it unencodable is undone on every replica and
fails with ``ApplyFailedError`` (``TypeError: ...; the call was undone``).
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgpack

from ._config import check_seconds
from ._host import RESULT_BYTES_MAX, ApplyFailedError, QueryFailedError, ReadNotConfirmedError, RepeatedFailureLog
from ._node import NotLeaderError
from ._types import Entry

__all__ = [
    "READ_MODES",
    "RESULT_BYTES_MAX",
    "ApplyFailedError",
    "NotLeaderError",
    "QueryFailedError",
    "Replicated",
    "ReplicatedClient",
    "query",
    "replicated",
]

logger = logging.getLogger("pykraft.replicated")

#: How a ``@query`` method reads (see the module docstring).
READ_MODES = ("linearizable", "leader-local", "follower")

_KIND = "_pykraft_kind"
_FUNCTION = "_pykraft_function"

F = TypeVar("F", bound=Callable[..., Any])


def replicated(method: F) -> F:
    """Mark a method as a replicated command: calling it proposes the call,
    waits until it is committed and returns what the method returned on
    the leader. It must be deterministic (same arguments and state, same
    result and state on every replica) and return a msgpack-able value.

    The call raises ``TypeError`` (arguments msgpack cannot encode) or
    ``ValueError`` (larger than ``quorum.runtime.PROPOSAL_BYTES_MAX``)
    before proposing,
    ``ApplyFailedError`` when the method raised, ``NotLeaderError`` (with
    ``forward=False``), ``TimeoutError`` (the outcome is then unknown) and
    ``RuntimeError`` when the object is not started. Decorating an
    ``async def`` raises ``TypeError``: it runs in the node's loop, in log
    order, and must return at once.
    """
    _refuse_async(method, "@replicated")

    @functools.wraps(method)
    def call(self: Replicated, *args: Any, **kwargs: Any) -> Any:
        _refuse_inside_a_method(method.__name__)
        return self._replica_or_raise().call_replicated(method.__name__, args, kwargs)

    setattr(call, _KIND, "replicated")
    setattr(call, _FUNCTION, method)
    return call  # type: ignore[return-value]


def query(method: F) -> F:
    """Mark a method as a read: calling it runs the method on this node's
    state after the read barrier of the object's read mode (linearizable by
    default; a linearizable or leader-local read on a follower runs on the
    leader). It must not change the state and must return a msgpack-able
    value. Raises like a ``@replicated`` call, except that an exception the
    method raises reaches the caller as it is, or as ``QueryFailedError``
    (an ``ApplyFailedError`` subclass, though nothing was applied) when it
    ran on the leader for a follower.
    Decorating an ``async def`` raises ``TypeError``."""
    _refuse_async(method, "@query")

    @functools.wraps(method)
    def call(self: Replicated, *args: Any, **kwargs: Any) -> Any:
        _refuse_inside_a_method(method.__name__)
        return self._replica_or_raise().call_query(method.__name__, args, kwargs)

    setattr(call, _KIND, "query")
    setattr(call, _FUNCTION, method)
    return call  # type: ignore[return-value]


def _refuse_async(method: Callable[..., Any], decorator: str) -> None:
    if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
        raise TypeError(
            f"{decorator} cannot mark {method.__qualname__}(), an async def: every replica runs it while applying "
            f"the log, in order, so it must be a plain def that returns at once (no awaiting, no IO)"
        )


# Set while a replicated method or a query runs (in the node's thread):
# a call of another decorated method from inside one would propose (or
# read) from the very thread that must apply it.
_running = threading.local()


def _refuse_inside_a_method(name: str) -> None:
    outer = getattr(_running, "name", None)
    if outer is not None:
        raise RuntimeError(
            f"{name}() was called from inside {outer}(): a @replicated or @query method runs on every replica "
            f"as part of applying the log, and cannot make a call of its own; call an undecorated helper "
            f"method with the shared logic instead"
        )


def _run_method(function: Callable[..., Any], target: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    _running.name = function.__name__
    try:
        return function(target, *args, **kwargs)
    finally:
        _running.name = None


def _methods(cls: type, kind: str) -> dict[str, Callable[..., Any]]:
    return {
        name: getattr(value, _FUNCTION)
        for name in dir(cls)
        if getattr(value := getattr(cls, name, None), _KIND, None) == kind
    }


def encode_call(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bytes:
    """The record of a call: msgpack ``[name, args, kwargs]``. Raises
    ``TypeError`` when msgpack cannot encode an argument, ``ValueError``
    when the record exceeds ``quorum.runtime.PROPOSAL_BYTES_MAX``."""
    try:
        record = msgpack.packb([name, list(args), kwargs], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise TypeError(f"the arguments of {name}() cannot be serialised with msgpack: {error}") from None
    from .runtime import check_records

    try:
        check_records([record])
    except ValueError as error:
        raise ValueError(f"the call {name}() cannot be proposed: {error}") from None
    return record


def _encode_outcome(
    name: str, run: Callable[[], Any], offset: int | None, query_failures: RepeatedFailureLog | None = None
) -> bytes:
    """Run a method and encode its outcome: ``[0, result]`` or ``[1,
    description]``; an exception (or a result msgpack cannot encode) is
    contained here, deterministically, so the failure travels back to the
    caller as an answer (through a forwarding follower too). A query's
    failure (``offset`` None) is logged through ``query_failures``: a
    caller retrying a failing read must not write a line per attempt."""
    try:
        outcome = msgpack.packb([0, run()], use_bin_type=True)
        if len(outcome) > RESULT_BYTES_MAX:
            # Deterministic, so every replica fails it alike; past this, a
            # forwarded call's answer could not be sent and its caller would
            # wait out its timeout for nothing.
            raise ValueError(
                f"the result encodes to {len(outcome)} bytes, over the limit of {RESULT_BYTES_MAX} an answer may carry"
            )
        return outcome
    except Exception as error:  # the user's method: contained, see above
        description = f"{type(error).__name__}: {error}"
        if offset is None and query_failures is not None:
            query_failures.failed((name, type(error).__name__), f"{name}() raised in a query ({description})", error)
            return msgpack.packb([1, description], use_bin_type=True)
        where = f"at offset {offset}" if offset is not None else "in a query"
        # One line per replica; the traceback at DEBUG (an expected
        # refusal of the user's own logic should not flood the log).
        logger.error("%s() raised %s (%s); the replica goes on", name, where, description)
        logger.debug("%s() raised %s", name, where, exc_info=True)
        return msgpack.packb([1, description], use_bin_type=True)


def _decode_outcome(answer: bytes | None, offset: int, *, read: bool = False) -> Any:
    """A call's result from its encoded outcome, or its failure raised:
    ``ApplyFailedError`` for a command, ``QueryFailedError`` for a read
    (``read``; ``offset`` is then where it was read)."""
    failure = QueryFailedError if read else ApplyFailedError
    if answer is None:
        raise failure(offset, f"the {'query' if read else 'record'} was not a call this object knows")
    failed, value = msgpack.unpackb(answer, raw=False, strict_map_key=False)
    if failed:
        raise failure(offset, value)
    return value


class ReplicatedStateMachine:
    """A ``quorum.StateMachine`` around a ``Replicated`` object, for use
    with ``quorum.runtime.open_quorum_node`` from trio code. ``apply`` runs
    the ``@replicated`` methods and answers each call with its encoded
    outcome; ``query`` answers a client's read (a forwarded ``@query``).

    The state must stay msgpack-able, or no snapshot could be taken: the
    constructor raises ``TypeError`` when the initial state is not, and a
    call that leaves it so is undone (the state is restored from its
    encoding before the call) and fails with a ``TypeError`` description,
    deterministically on every replica. The check is one encoding of the
    state per call, and that encoding is the snapshot: ``snapshot()`` costs
    nothing."""

    def __init__(self, target: Replicated) -> None:
        """Raises ``TypeError`` naming the class when msgpack cannot encode
        its ``snapshot_state()`` (a ``set`` attribute, say)."""
        self.target = target
        self._commands = _methods(type(target), "replicated")
        self._queries = _methods(type(target), "query")
        # Reads a client retries when a @query method raises: not a log
        # line each (see RepeatedFailureLog).
        self.query_failures = RepeatedFailureLog(logger)
        self._encoded_state: bytes | None = self._encode_state()

    def _encode_state(self) -> bytes:
        try:
            return msgpack.packb(self.target.snapshot_state(), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as error:
            raise TypeError(
                f"the state of {type(self.target).__name__} cannot be snapshotted with msgpack ({error}): "
                "keep msgpack-able public attributes or override snapshot_state() and restore_state()"
            ) from None

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        answers: dict[int, bytes] = {}
        for entry in entries:
            call = self._decode(entry.data, self._commands)
            if call is None:
                continue  # not a call of this class: ignored, as KeyValueStateMachine does
            function, args, kwargs = call
            outcome = _encode_outcome(function.__name__, lambda: _run_method(function, self.target, args, kwargs), entry.offset)
            try:
                self._encoded_state = self._encode_state()
            except Exception as error:  # the user's state or snapshot_state(): contained
                # Undone from the encoding before the call: every replica ran
                # the same call on the same state, so every replica fails it
                # here and returns to the same state.
                self._undo()
                description = f"{type(error).__name__}: {error}; the call was undone"
                logger.error("%s() at offset %d: %s", function.__name__, entry.offset, description)
                outcome = msgpack.packb([1, description], use_bin_type=True)
            answers[entry.offset] = outcome
        return answers

    def run_query(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """Run the ``@query`` method ``name`` on this node's state."""
        return _run_method(self._queries[name], self.target, args, kwargs)

    def query(self, request: bytes) -> bytes | None:
        call = self._decode(request, self._queries)
        if call is None:
            return None
        function, args, kwargs = call
        return _encode_outcome(
            function.__name__, lambda: _run_method(function, self.target, args, kwargs), None, self.query_failures
        )

    def _undo(self) -> None:
        previous, self._encoded_state = self._encoded_state, None
        self.restore(previous)  # on success, sets the encoding again

    def snapshot(self) -> bytes:
        """The state's encoding after the last call. Raises
        ``RuntimeError`` only after ``restore_state()`` failed to undo a
        call, until a call succeeds again (the host skips the snapshot)."""
        if self._encoded_state is None:
            raise RuntimeError(f"the state of {type(self.target).__name__} is unknown: restore_state() failed")
        return self._encoded_state

    def restore(self, data: bytes) -> None:
        self.target.restore_state(msgpack.unpackb(data, raw=False, strict_map_key=False))
        self._encoded_state = data

    @staticmethod
    def _decode(data: bytes, methods: dict[str, Callable[..., Any]]) -> tuple[Callable[..., Any], list, dict] | None:
        try:
            call = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        if not (isinstance(call, list) and len(call) == 3 and isinstance(call[1], list) and isinstance(call[2], dict)):
            return None
        function = methods.get(call[0]) if isinstance(call[0], str) else None
        if function is None:
            return None
        return function, call[1], call[2]


class Replicated:
    """Base class of a replicated object (see the module docstring).

    Subclasses mark their commands ``@replicated`` and their reads
    ``@query``; ``__init__`` sets the initial state (no ``super().__init__()``
    needed). ``start(...)`` runs a node for the object; ``close()`` (or the
    end of a ``with`` block) stops it.
    """

    _replica: Any = None

    def snapshot_state(self) -> Any:
        """The state a snapshot holds, msgpack-able. Default: the public
        attributes (names not starting with ``_``). Tuples come back as
        lists, as they do for a call's arguments."""
        return {name: value for name, value in sorted(vars(self).items()) if not name.startswith("_")}

    def restore_state(self, state: Any) -> None:
        """Replace the state with ``state`` from ``snapshot_state``."""
        for name in [name for name in vars(self) if not name.startswith("_")]:
            delattr(self, name)
        for name, value in state.items():
            setattr(self, name, value)

    def start(
        self,
        *,
        node_id: int,
        voters: str | dict[int, tuple[str, int]],
        data_dir: str | Path | None = None,
        forward: bool = True,
        read: str = "linearizable",
        timeout_s: float = 10.0,
        cluster_id: str = "pykraft",
        **node_options: Any,
    ) -> Any:
        """Run a quorum node for this object on a thread of its own and
        return the object (``counter = Counter().start(...)``).

        ``voters`` is ``"1@HOST:PORT,2@HOST:PORT,..."`` or a map; ``data_dir``
        None keeps the log in memory. ``forward``: a call on a follower goes
        to the leader (else ``NotLeaderError``). ``read``: one of
        ``READ_MODES``. ``timeout_s`` bounds every call. ``node_options``
        go to ``quorum.runtime.NodeConfig``, and one of two must be among
        them: ``tls=TlsConfig(ca, cert, key)`` makes the node and its
        forwarding client mutual TLS with this node's certificate
        (docs/security.md), ``plaintext=True`` chooses no TLS (teaching,
        quick starts). Raises ``ValueError`` for a bad setting (neither of
        the two, say), ``RuntimeError`` if already started, ``TypeError`` if
        msgpack cannot encode the object's state (see ``snapshot_state``), and
        what opening the node raises (``OSError`` for a port in use, the storage errors;
        ``StorageOwnershipError`` for a fresh disk given static ``voters`` in a cluster
        with dynamic voters: ``quorum.client.refuse_a_fresh_static_disk_in_a_dynamic_cluster``).
        """
        _refuse_inside_a_method("start")
        if self._replica is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        if read not in READ_MODES:
            raise ValueError(f"unknown read mode {read!r}: expected one of {', '.join(READ_MODES)}")
        if type(forward) is not bool:
            raise TypeError(f"forward must be True or False, got {forward!r}")
        timeout_s = check_seconds(timeout_s, "timeout_s")
        from .runtime import NodeConfig, parse_voters

        config = NodeConfig(
            node_id=node_id,
            voters=parse_voters(voters) if isinstance(voters, str) else voters,
            data_dir=data_dir,
            cluster_id=cluster_id,
            **node_options,
        )
        replica = _Replica(self, config, forward=forward, read=read, timeout_s=timeout_s)
        replica.start()
        self._replica = replica
        return self

    def close(self) -> None:
        """Stop the node (a leader hands over first). Idempotent."""
        # From the node's own thread it could not wait for the node to stop,
        # and would leave it running with no way to close it.
        _refuse_inside_a_method("close")
        replica, self._replica = self._replica, None
        if replica is not None:
            replica.close()

    def wait_for_leader(self, timeout_s: float | None = None) -> int:
        """Block until a leader is known here; returns its id. Raises
        ``TimeoutError`` (``ValueError`` for a ``timeout_s`` that is not a
        positive, finite number)."""
        if timeout_s is not None:
            timeout_s = check_seconds(timeout_s, "timeout_s")
        return self._replica_or_raise().wait_for_leader(timeout_s)

    @property
    def is_leader(self) -> bool:
        """Whether this node leads (and has committed a record of its epoch)."""
        return self._replica_or_raise().handle.is_leader

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _replica_or_raise(self) -> _Replica:
        replica = self._replica
        if replica is None:
            raise RuntimeError(
                f"{type(self).__name__} is not started (or was closed): call start(node_id=..., voters=...) first"
            )
        return replica


class _Replica:
    """The node behind a started object: a trio loop on its own thread, an
    ``open_quorum_node`` in it, and a ``QuorumClient`` to forward with."""

    def __init__(self, target: Replicated, config: Any, *, forward: bool, read: str, timeout_s: float) -> None:
        self.target = target
        self.config = config
        self.forward = forward
        self.read_mode = read
        self.timeout_s = timeout_s
        self.machine = ReplicatedStateMachine(target)
        self.handle: Any = None
        self._client: Any = None
        self._token: Any = None
        self._stop: Any = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"pykraft-{type(target).__name__}-{config.node_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        import trio

        try:
            trio.run(self._main)
        except BaseException as error:  # handed to start(), or logged once running
            if not self._started.is_set():
                self._error = error
            else:
                logger.exception("node %d stopped with an error", self.config.node_id)
        finally:
            self._started.set()

    async def _main(self) -> None:
        import trio

        from .client import QuorumClient, refuse_a_fresh_static_disk_in_a_dynamic_cluster
        from .runtime import open_quorum_node

        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        bootstrap = [f"{node}@{host}:{port}" for node, (host, port) in sorted(self.config.voters.items())]
        # As kraft-quorum node does: a disk replaced after an upgrade to
        # dynamic voters must not start as a static voter with an empty log.
        await refuse_a_fresh_static_disk_in_a_dynamic_cluster(self.config)
        async with open_quorum_node(self.config, self.machine) as handle:
            # The client retries past the call's own bound, so that a call
            # with no leader to forward to ends as TimeoutError, always.
            async with QuorumClient(
                bootstrap, cluster_id=self.config.cluster_id, retry_timeout_s=self.timeout_s + 1, tls=self.config.tls
            ) as client:
                self.handle, self._client = handle, client
                self._started.set()
                await self._stop.wait()

    def close(self) -> None:
        import trio

        if self._thread.is_alive() and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    def _run_in_loop(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``await function(*args)`` in the node's loop, bounded by
        ``timeout_s``; ``TimeoutError`` past it."""
        import trio

        async def bounded() -> Any:
            with trio.move_on_after(self.timeout_s):
                return True, await function(*args)
            return False, None

        if not self._thread.is_alive():
            raise RuntimeError("the node is stopped")
        finished, result = trio.from_thread.run(bounded, trio_token=self._token)
        if not finished:
            raise TimeoutError(f"no outcome within {self.timeout_s} s (a write may or may not have happened)")
        return result

    def wait_for_leader(self, timeout_s: float | None) -> int:
        import trio

        async def wait() -> int | None:
            with trio.move_on_after(self.timeout_s if timeout_s is None else timeout_s):
                return await self.handle.wait_for_leader()
            return None

        if not self._thread.is_alive():
            raise RuntimeError("the node is stopped")
        leader = trio.from_thread.run(wait, trio_token=self._token)
        if leader is None:
            raise TimeoutError("no leader known within the timeout")
        return leader

    def call_replicated(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        record = encode_call(name, args, kwargs)
        return self._run_in_loop(self._propose, record)

    async def _propose(self, record: bytes) -> Any:
        runtime = self.handle.runtime
        try:
            last, answers = await runtime.propose_with_answers([record])
        except NotLeaderError:
            if not self.forward:
                raise
            last, answers = await self._client.propose_with_results([record])
        return _decode_outcome(answers[0], last)

    def call_query(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        request = encode_call(name, args, kwargs)
        return self._run_in_loop(self._query, name, args, kwargs, request)

    async def _query(self, name: str, args: Sequence[Any], kwargs: dict[str, Any], request: bytes) -> Any:
        mode = self.read_mode
        if mode != "follower":
            try:
                await self.handle.read(mode)
            except (NotLeaderError, ReadNotConfirmedError):  # not (or no longer) the leader
                if not self.forward:
                    raise
                offset, answer = await self._client.read(request, mode=mode)
                return _decode_outcome(answer, offset, read=True)
        # In the loop's thread: no record is being applied meanwhile.
        return self.machine.run_query(name, args, kwargs)


class ReplicatedClient:
    """Calls a replicated object's methods from a program that is not one
    of its nodes (a test harness, a command-line tool), over a
    ``QuorumClient``: ``await client.call("transfer", "a", "b", 5)`` runs
    the ``@replicated`` method through the leader and returns what it
    returned there; ``await client.query("balances")`` runs a ``@query``
    method on the leader (``mode``: ``"linearizable"`` by default, or
    ``"leader-local"``).

    The class itself is not needed here: the call travels by name, as a
    follower's forwarded call does. Use as an async context manager, from
    trio; ``bootstrap`` lists ``ID@HOST:PORT`` of any voters, and ``tls`` /
    ``cluster_id`` / the timeouts are ``QuorumClient``'s.

    ``call`` and ``query`` raise ``TypeError``/``ValueError`` for arguments
    that cannot be proposed (as on a node), ``ApplyFailedError`` when a
    command raised (on every replica alike), ``QueryFailedError`` (a
    subclass of it) when a query raised on the leader, the
    ``QuorumClient`` errors otherwise: ``IndeterminateError`` when the call
    may or may not have happened, ``QuorumClientError`` when it did not.
    """

    def __init__(
        self,
        bootstrap: list[str],
        *,
        cluster_id: str = "pykraft",
        tls: Any = None,
        request_timeout_s: float = 5.0,
        retry_timeout_s: float = 30.0,
    ) -> None:
        from .client import QuorumClient

        self._client = QuorumClient(
            bootstrap,
            cluster_id=cluster_id,
            tls=tls,
            request_timeout_s=request_timeout_s,
            retry_timeout_s=retry_timeout_s,
        )

    @property
    def last_answered_by(self) -> Any:
        """The server whose answer ended the last call (``QuorumClient``'s)."""
        return self._client.last_answered_by

    async def __aenter__(self) -> ReplicatedClient:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._client.__aexit__(*exc_info)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run the ``@replicated`` method ``name`` once committed; its result."""
        record = encode_call(name, args, kwargs)
        last, answers = await self._client.propose_with_results([record])
        return _decode_outcome(answers[0], last)

    async def query(self, name: str, *args: Any, mode: str = "linearizable", **kwargs: Any) -> Any:
        """Run the ``@query`` method ``name`` on the leader, read in ``mode``."""
        if mode not in ("linearizable", "leader-local"):
            raise ValueError(f"a client reads in linearizable or leader-local mode, not {mode!r}")
        offset, answer = await self._client.read(encode_call(name, args, kwargs), mode=mode)
        return _decode_outcome(answer, offset, read=True)
