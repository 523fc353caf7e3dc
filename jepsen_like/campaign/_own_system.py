"""Campaigns against your own system: a workload of your operations, the
nemeses, a history, and the checker with your model (docs/test-your-state-machine.md).

Two pieces meet here:

- a **system**: the processes under test and how to fault them.
  :class:`ProcessCluster` runs any program, one process per node, behind
  the campaign's userspace proxy, so that partitions, kill -9 and pauses
  are real; :class:`ReplicatedCluster` is the one for a
  ``quorum.replicated.Replicated`` class of yours, served by node processes
  (``replicated_node``);
- a **client adapter** per worker: ``invoke(op) -> result``, as Jepsen's
  clients do. It returns the operation's result (recorded ``ok``), raises
  :class:`Failed` when the operation certainly did not happen (``fail``),
  and anything else means it may or may not have happened (``info``).
  ``invoke`` may be a coroutine function (trio) or a plain function (run on
  a worker thread); an adapter that is an async context manager is entered
  for the worker's whole run.

:func:`run_own_campaign` drives them for a while, records the history in
the project's format (``history.jsonl``: the Spark checker, the reference
checker and the report read it) and checks it against a model, such as
one made from your ``step(state, op) -> (ok, result, new_state)``
(``jepsen_like.checker.model_from_step``).
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from jepsen_like.checker import Model, check, search_history
from jepsen_like.nemesis import HOSTILE_KINDS, HostileTarget, ProxyNetwork, run_kind
from quorum.client import IndeterminateError, QuorumClient, QuorumClientError
from quorum.replicated import ApplyFailedError, Replicated, ReplicatedClient

from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup
from ._storage_faults import NothingToDamageError, flip_byte, torn_write

logger = logging.getLogger("pykraft.campaign")

#: The nemeses :func:`run_own_campaign` knows: kill -9 and restart one
#: node, pause one (SIGSTOP/SIGCONT), cut one off from every other member,
#: hostile clients at one node's own port (garbage, oversized, stalled,
#: pipelined, forged and flooding traffic: ``jepsen_like.nemesis``), and a
#: damaged disk (kill, a torn write or a flipped byte in its log, restart;
#: for systems whose disks the harness knows, ``ReplicatedCluster``).
OWN_NEMESES = ("kill", "pause", "partition", "hostile", "storage")
#: The nemeses a campaign runs when not told (the others are asked for).
DEFAULT_OWN_NEMESES = ("kill", "pause", "partition")

#: Where hostile traffic comes from on loopback: an address of its own, so
#: that a node's per-address caps tell it from the proxy's links.
HOSTILE_SOURCE_HOST = "127.0.0.66"


# A worker whose operation ended indeterminate waits this long before its
# next one, doubling up to the maximum while they keep ending so.
INFO_BACKOFF_S = 0.1
INFO_BACKOFF_MAX_S = 1.0


class Failed(Exception):
    """Raised by a client adapter when the operation certainly did not take
    effect (refused, rejected before it was sent): recorded ``fail``."""


class ClientAdapter(Protocol):
    def invoke(self, op: dict[str, Any]) -> Any: ...


class System(Protocol):
    """What :func:`run_own_campaign` needs of the system under test."""

    node_ids: list[int]

    def client(self, index: int) -> ClientAdapter: ...
    async def wait_ready(self, timeout_s: float) -> None: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def isolate(self, node_id: int) -> dict[str, Any]: ...
    def heal(self) -> None: ...


@dataclass(frozen=True)
class NodeSpec:
    """What a node's command line needs: its id, the address it must
    listen on, every other node's address as this node must reach it
    (through the proxy), and a data directory of its own."""

    node_id: int
    listen: tuple[str, int]
    peers: dict[int, tuple[str, int]]
    data_dir: Path


class ProcessCluster:
    """Processes of any system, one per node, behind the campaign's proxy
    network. A context manager.

    ``command(spec)`` is the argv that starts node ``spec.node_id``
    (:class:`NodeSpec`); ``client_adapter(addresses)`` makes one worker's
    adapter from ``{node_id: (host, port)}``, the addresses that worker
    reaches the nodes at (through the proxy, so a partition cuts it off
    too). :meth:`wait_ready` waits until every node accepts connections;
    override it for a readiness of your own.

    Raises ``ValueError`` for a node count outside 1 to 9.
    """

    def __init__(
        self,
        command: Callable[[NodeSpec], list[str]],
        client_adapter: Callable[[dict[int, tuple[str, int]]], Any],
        run_dir: str | Path,
        *,
        nodes: int = 1,
        clients: int = 4,
    ) -> None:
        if not 1 <= nodes <= 9:
            raise ValueError(f"nodes must be 1 to 9, got {nodes}")
        self.command = command
        self.client_adapter = client_adapter
        self.run_dir = Path(run_dir)
        self.clients = clients
        self.node_ids = list(range(1, nodes + 1))
        self.processes = ProcessGroup()
        self.network: ProxyNetwork | None = None

    def __enter__(self) -> ProcessCluster:
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.network = ProxyNetwork(proxy_stderr=logs / "proxy.log").open()
        try:
            for node_id in self.node_ids:
                self.network.add_node(node_id, "controller", zone=f"az{node_id}")
            for index in range(self.clients):
                self.network.add_client(f"client{index}")
            for node_id in self.node_ids:
                self.processes.add(NodeProcess(node_id, "controller", self._argv(node_id), logs / f"node{node_id}.log")).start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.processes.stop_all()
        if self.network is not None:
            self.network.close()

    def _network(self) -> ProxyNetwork:
        if self.network is None:
            raise RuntimeError("start the cluster first (with ProcessCluster(...) as cluster)")
        return self.network

    def _argv(self, node_id: int) -> Callable[[], list[str]]:
        def argv() -> list[str]:
            network = self._network()
            spec = NodeSpec(
                node_id=node_id,
                listen=network.listen_address(node_id),
                peers={peer: network.address_for(node_id, peer) for peer in self.node_ids if peer != node_id},
                data_dir=self.run_dir / "data" / f"node{node_id}",
            )
            spec.data_dir.mkdir(parents=True, exist_ok=True)
            return network.run_in(node_id, self.command(spec))

        return argv

    def addresses_for(self, index: int) -> dict[int, tuple[str, int]]:
        """Where worker ``index`` reaches each node."""
        network = self._network()
        return {node_id: network.address_for(f"client{index % self.clients}", node_id) for node_id in self.node_ids}

    def client(self, index: int) -> Any:
        return self.client_adapter(self.addresses_for(index))

    async def wait_ready(self, timeout_s: float) -> None:
        """Until every node accepts a TCP connection on its own listen
        address (not through the proxy, which accepts on a node's behalf
        whether or not the node is up). Raises ``TimeoutError``."""
        waiting = set(self.node_ids)
        network = self._network()
        with trio.move_on_after(timeout_s):
            while waiting:
                for node_id in sorted(waiting):
                    if await trio.to_thread.run_sync(_accepts, *network.listen_address(node_id)):
                        waiting.discard(node_id)
                if waiting:
                    await trio.sleep(0.1)
            return
        raise TimeoutError(f"nodes {sorted(waiting)} did not accept connections within {timeout_s} s")

    def kill(self, node_id: int) -> None:
        self.processes.nodes[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.processes.nodes[node_id].start()

    def pause(self, node_id: int) -> None:
        self.processes.nodes[node_id].pause()

    def resume(self, node_id: int) -> None:
        self.processes.nodes[node_id].resume()

    def isolate(self, node_id: int) -> dict[str, Any]:
        return self._network().isolate(node_id, clients=True).as_history_value()

    def hostile_target(self, node_id: int) -> HostileTarget:
        """Node ``node_id``'s own listener, as a hostile client would dial
        it (not through the proxy), from an address of its own."""
        host, port = self._network().listen_address(node_id)
        return HostileTarget(
            host=host, port=port, node_id=node_id, voter_ids=tuple(self.node_ids), cluster_id="pykraft",
            source_host=HOSTILE_SOURCE_HOST,
        )

    def heal(self) -> None:
        if self.network is not None:
            self.network.heal()
        for node in self.processes.nodes.values():
            if node.paused:
                node.resume()
            if not node.running:
                node.start()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _import_root(target: type) -> tuple[str, list[str]]:
    """``MODULE:CLASS`` for ``target``, and the directory its top-level
    package is imported from (for the node processes' ``sys.path``). A
    class of a script run as ``__main__`` is imported by the script's file
    name."""
    module_name = target.__module__
    module_file = getattr(sys.modules.get(module_name), "__file__", None)
    if not module_file or "<" in target.__qualname__:
        raise ValueError(f"{target.__qualname__} must be a module-level class of a module with a file")
    path = Path(module_file).resolve()
    if module_name == "__main__":
        module_name = path.stem
    root = path.parent
    for _ in range(module_name.count(".")):
        root = root.parent
    return f"{module_name}:{target.__qualname__}", [str(root)]


class _ReplicatedAdapter:
    """Calls the replicated object's methods by name: ``op["f"]`` is the
    method, ``op["value"]`` its argument list (or one argument); names in
    ``queries`` are ``@query`` methods."""

    def __init__(self, bootstrap: list[str], queries: frozenset[str], request_timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.queries = queries
        self.request_timeout_s = request_timeout_s
        self._client: ReplicatedClient | None = None

    async def __aenter__(self) -> _ReplicatedAdapter:
        self._client = ReplicatedClient(
            self.bootstrap, request_timeout_s=self.request_timeout_s, retry_timeout_s=2 * self.request_timeout_s
        )
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.__aexit__(*exc_info)

    async def invoke(self, op: dict[str, Any]) -> Any:
        if self._client is None:
            raise RuntimeError("use the adapter as an async context manager (run_own_campaign does)")
        value = op.get("value")
        args = value if isinstance(value, list) else [] if value is None else [value]
        try:
            if op["f"] in self.queries:
                return await self._client.query(op["f"], *args)
            return await self._client.call(op["f"], *args)
        except ApplyFailedError as error:  # the method raised on every replica: no effect
            raise Failed(str(error)) from None
        except IndeterminateError:
            # Before QuorumClientError, its base class: a call in flight when
            # its connection failed may have taken effect, so it is recorded
            # as indeterminate (info), never as a failure.
            raise
        except QuorumClientError as error:  # refused for good before it took effect
            raise Failed(str(error)) from None


class ReplicatedCluster(ProcessCluster):
    """Node processes serving ``target`` (a ``Replicated`` subclass whose
    constructor takes no arguments, in a module with a file) as one pykraft
    quorum, one proxy between every pair of members. ``queries`` names the
    ``@query`` methods the adapters read with.

    Raises ``TypeError`` for a target that is not a ``Replicated``
    subclass, ``ValueError`` for one defined where node processes cannot
    import it, or a node count outside 1 to 9.
    """

    def __init__(
        self,
        target: type[Replicated],
        run_dir: str | Path,
        *,
        nodes: int = 3,
        clients: int = 4,
        queries: tuple[str, ...] = (),
        election_timeout_ms: int = 1000,
        fetch_timeout_ms: int = 2000,
        # Longer than a pause or a partition lasts: a request to a node that
        # comes back is answered (ok or fail) instead of ending
        # indeterminate, and every indeterminate operation costs the
        # linearizability search.
        request_timeout_s: float = 5.0,
    ) -> None:
        if not (isinstance(target, type) and issubclass(target, Replicated)):
            raise TypeError(f"target must be a quorum.replicated.Replicated subclass, got {target!r}")
        self.target = target
        self.queries = frozenset(queries)
        self.election_timeout_ms = election_timeout_ms
        self.fetch_timeout_ms = fetch_timeout_ms
        self.request_timeout_s = request_timeout_s
        self._spec, self._import_paths = _import_root(target)
        super().__init__(self._node_command, self._adapter, run_dir, nodes=nodes, clients=clients)

    def _node_command(self, spec: NodeSpec) -> list[str]:
        voters = ",".join(
            f"{node_id}@{host}:{port}" for node_id, (host, port) in sorted({**spec.peers, spec.node_id: spec.listen}.items())
        )
        command = [
            sys.executable, "-m", "jepsen_like.campaign.replicated_node",
            "--target", self._spec,
            "--node-id", str(spec.node_id),
            "--voters", voters,
            "--listen", f"{spec.listen[0]}:{spec.listen[1]}",
            "--data-dir", str(spec.data_dir),
            "--election-timeout-ms", str(self.election_timeout_ms),
            "--fetch-timeout-ms", str(self.fetch_timeout_ms),
        ]  # fmt: skip
        for path in self._import_paths:
            command += ["--import-path", path]
        return command

    def _adapter(self, addresses: dict[int, tuple[str, int]]) -> _ReplicatedAdapter:
        bootstrap = [f"{node_id}@{host}:{port}" for node_id, (host, port) in sorted(addresses.items())]
        return _ReplicatedAdapter(bootstrap, self.queries, self.request_timeout_s)

    def damage_storage(self, node_id: int, rng: random.Random) -> dict[str, Any]:
        """Kill node ``node_id`` and damage its log as a disk can: a torn
        write at the end (cut at the next start), or a flipped bit in a
        batch a valid one follows (damage: the node repairs from the
        leader before it votes again, docs/storage.md). The caller
        restarts it. Falls back to a torn write while the log is too short
        for a flip; raises ``NothingToDamageError`` for an empty log."""
        self.kill(node_id)
        data_dir = self.run_dir / "data" / f"node{node_id}"
        if rng.random() < 0.5:
            try:
                return flip_byte(data_dir, rng)
            except NothingToDamageError:
                pass
        return torn_write(data_dir, rng)

    async def wait_ready(self, timeout_s: float) -> None:
        """Until a node names a leader. Raises ``TimeoutError``."""
        bootstrap = [f"{node_id}@{host}:{port}" for node_id, (host, port) in sorted(self.addresses_for(0).items())]
        with trio.move_on_after(timeout_s):
            while True:
                async with QuorumClient(bootstrap, request_timeout_s=0.5, retry_timeout_s=0.5) as probe:
                    try:
                        answer = await probe.describe()
                        if answer.leader_id is not None and answer.leader_id >= 0:
                            return
                    except QuorumClientError:
                        pass
                await trio.sleep(0.1)
        raise TimeoutError(f"no leader among nodes {self.node_ids} within {timeout_s} s")


@dataclass
class OwnCampaignResult:
    """What :func:`run_own_campaign` found: ``valid`` is the checker's
    verdict (``True``, ``False`` or ``"unknown"``), ``result`` its
    ``HistoryResult``, ``history`` the recorded file."""

    valid: bool | str
    result: Any
    history: Path
    counts: dict[str, int]
    faults: int


async def _invoke(adapter: Any, op: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(adapter.invoke):
        return await adapter.invoke(op)
    return await trio.to_thread.run_sync(adapter.invoke, op, abandon_on_cancel=True)


async def _client_loop(
    system: System,
    index: int,
    clients: int,
    generate: Callable[[random.Random], dict[str, Any]],
    recorder: HistoryRecorder,
    rng: random.Random,
    deadline: float,
    op_timeout_s: float,
) -> None:
    adapter = system.client(index)
    process = index
    consecutive_info = 0
    async with _maybe_context(adapter):
        while trio.current_time() < deadline:
            op = generate(rng)
            if not isinstance(op, dict) or not isinstance(op.get("f"), str):
                raise TypeError(f"generate must return {{'f': name, 'value': argument}}, got {op!r}")
            recorder.record(process, "invoke", op["f"], None, op.get("value"))
            try:
                with trio.fail_after(op_timeout_s):
                    result = await _invoke(adapter, op)
            except Failed as refusal:
                recorder.record(process, "fail", op["f"], None, op.get("value"), error=str(refusal)[:200])
            except (Exception, trio.TooSlowError) as error:  # may or may not have happened
                recorder.record(process, "info", op["f"], None, op.get("value"), error=f"{type(error).__name__}: {error}"[:200])
                # Jepsen's rule: a process whose operation is indeterminate
                # never issues another (it would overlap the open one).
                process += clients
                # Back off while the system is unreachable: each
                # indeterminate operation stays open for the rest of the
                # history and multiplies the search's work.
                consecutive_info += 1
                await trio.sleep(min(INFO_BACKOFF_MAX_S, INFO_BACKOFF_S * 2 ** (consecutive_info - 1)))
            else:
                recorder.record(process, "ok", op["f"], None, result)
                consecutive_info = 0


class _maybe_context:
    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    async def __aenter__(self) -> Any:
        if hasattr(self.adapter, "__aenter__"):
            await self.adapter.__aenter__()
        return self.adapter

    async def __aexit__(self, *exc_info: Any) -> None:
        if hasattr(self.adapter, "__aexit__"):
            await self.adapter.__aexit__(*exc_info)


async def _nemesis_loop(
    system: System, nemeses: tuple[str, ...], recorder: HistoryRecorder, rng: random.Random, deadline: float, fault_s: float
) -> int:
    faults = 0
    while trio.current_time() + 2 * fault_s < deadline:
        await trio.sleep(fault_s * (0.5 + rng.random()))
        kind = rng.choice(nemeses)
        node_id = rng.choice(system.node_ids)
        faults += 1
        fault: dict[str, Any] = {"fault_id": faults, "shape": kind, "node": node_id}
        if kind == "kill":
            await trio.to_thread.run_sync(system.kill, node_id)
        elif kind == "pause":
            await trio.to_thread.run_sync(system.pause, node_id)
        elif kind == "partition":
            fault = {**await trio.to_thread.run_sync(system.isolate, node_id), "fault_id": faults}
        elif kind == "storage":
            damage_rng = random.Random(rng.getrandbits(64))
            try:
                fault["damage"] = await trio.to_thread.run_sync(system.damage_storage, node_id, damage_rng)  # type: ignore[attr-defined]
            except NothingToDamageError as nothing:
                fault["damage"] = {"kind": "none", "reason": str(nothing)}
        recorder.nemesis(kind, {"phase": "start", "fault": fault})
        if kind == "hostile":
            attack_kind = rng.choice(sorted(HOSTILE_KINDS))
            fault["attacks"] = list(HOSTILE_KINDS[attack_kind])
            results = await run_kind(attack_kind, system.hostile_target(node_id), fault_s, seed=rng.getrandbits(32))  # type: ignore[attr-defined]
            fault["stats"] = [stats.as_history_value() for stats in results]
        else:
            await trio.sleep(fault_s)
        if kind in ("kill", "storage"):
            await trio.to_thread.run_sync(system.restart, node_id)
        elif kind == "pause":
            await trio.to_thread.run_sync(system.resume, node_id)
        elif kind == "partition":
            await trio.to_thread.run_sync(system.heal)
        recorder.nemesis(kind, {"phase": "end", "fault": fault})
    return faults


async def run_own_campaign(
    system: System,
    *,
    model: Model,
    generate: Callable[[random.Random], dict[str, Any]],
    run_dir: Path,
    clients: int = 4,
    duration_s: float = 10.0,
    nemeses: tuple[str, ...] = DEFAULT_OWN_NEMESES,
    fault_s: float = 1.0,
    seed: int = 0,
    op_timeout_s: float = 12.0,
    checker: str = "spark",
    ready_timeout_s: float = 30.0,
) -> OwnCampaignResult:
    """Drive ``clients`` workers of ``generate``'s operations against
    ``system`` for ``duration_s`` while the ``nemeses`` fault it (one fault
    at a time, about ``fault_s`` each), record ``run_dir/history.jsonl``,
    heal, and check the history against ``model`` with the Spark checker
    (``checker="spark"``: every check, ``result`` is its ``HistoryResult``)
    or with the linearizability search alone in this process (``"search"``:
    quick feedback, ``result`` maps each key to its ``KeyVerdict``). ``generate(rng)`` returns one operation, ``{"f": name, "value":
    argument}``, from the worker's own seeded ``random.Random``.

    ``hostile`` needs a system with ``hostile_target(node_id)``
    (``ProcessCluster`` has one), ``storage`` one with
    ``damage_storage(node_id, rng)`` (``ReplicatedCluster``: it knows
    pykraft's log format).

    Raises ``ValueError`` for an unknown nemesis or checker, or one the
    system does not support, ``TimeoutError``
    when the system shows no leader within ``ready_timeout_s``, and what the
    checker raises (``HistoryFormatError``).
    """
    unknown = sorted(set(nemeses) - set(OWN_NEMESES))
    if unknown:
        raise ValueError(f"unknown nemeses {unknown}; choose from {', '.join(OWN_NEMESES)}")
    for nemesis, method in (("hostile", "hostile_target"), ("storage", "damage_storage")):
        if nemesis in nemeses and not hasattr(system, method):
            raise ValueError(f"the {nemesis} nemesis needs a system with {method}() ({type(system).__name__} has none)")
    if checker not in ("spark", "search"):
        raise ValueError(f"checker must be 'spark' or 'search', got {checker!r}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    await system.wait_ready(ready_timeout_s)
    recorder = HistoryRecorder(run_dir / "history.jsonl")
    faults = 0
    try:
        deadline = trio.current_time() + duration_s
        async with trio.open_nursery() as nursery:
            for index in range(clients):
                nursery.start_soon(
                    _client_loop, system, index, clients, generate, recorder, random.Random(f"{seed}/{index}"), deadline, op_timeout_s
                )
            if nemeses:

                async def faults_task() -> None:
                    nonlocal faults
                    faults = await _nemesis_loop(system, tuple(nemeses), recorder, random.Random(f"{seed}/nemesis"), deadline, fault_s)

                nursery.start_soon(faults_task)
    finally:
        recorder.close()
        await trio.to_thread.run_sync(system.heal)
    (run_dir / "meta.json").write_text(json.dumps({"step_model": model.name, "seed": seed, "nemeses": list(nemeses)}) + "\n")
    history = run_dir / "history.jsonl"
    if checker == "spark":
        result = (await trio.to_thread.run_sync(lambda: check([str(history)], model=model, spark_log=run_dir / "spark.log")))[0]
        valid = result.valid
    else:
        result = await trio.to_thread.run_sync(lambda: search_history(history, model=model))
        verdicts = {verdict.verdict for verdict in result.values()}
        valid = False if "not-linearizable" in verdicts else "unknown" if "unknown" in verdicts else True
    return OwnCampaignResult(valid=valid, result=result, history=history, counts=dict(recorder.counts), faults=faults)
