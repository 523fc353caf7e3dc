"""Campaigns against your own system: a workload of your operations, the
nemeses, a history, and the checker with your model (docs/test-your-state-machine.md).

Two pieces meet here:

- a **system**: the processes under test and how to fault them. The one
  built in is :class:`ReplicatedCluster`, a ``quorum.replicated.Replicated``
  class of yours served by node processes (``replicated_node``) behind the
  campaign's proxy network, so that partitions, kill -9 and pauses are real;
- a **client adapter** per worker: ``invoke(op) -> result``, as Jepsen's
  clients do. It returns the operation's result (recorded ``ok``), raises
  :class:`Failed` when the operation certainly did not happen (``fail``),
  and anything else means it may or may not have happened (``info``).
  ``invoke`` may be a coroutine function (trio) or a plain function (run on
  a worker thread).

:func:`run_own_campaign` drives them for a while, records the history in
the project's format (``history.jsonl``: the Spark checker, the reference
checker and the report read it) and checks it against a model made from
your ``step(state, op) -> (ok, result, new_state)``.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from jepsen_like.checker import Model, check, search_history
from jepsen_like.nemesis import ProxyNetwork
from quorum.client import IndeterminateError, QuorumClientError
from quorum.replicated import ApplyFailedError, Replicated, ReplicatedClient

from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup

logger = logging.getLogger("pykraft.campaign")

#: The nemeses :func:`run_own_campaign` knows: kill -9 and restart one
#: node, pause one (SIGSTOP/SIGCONT), cut one off from every other member.
OWN_NEMESES = ("kill", "pause", "partition")


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
            raise
        except QuorumClientError as error:  # refused for good before it took effect
            raise Failed(str(error)) from None


@dataclass
class ReplicatedCluster:
    """Node processes serving ``target`` (a ``Replicated`` subclass whose
    constructor takes no arguments), one proxy between every pair of
    members. A context manager; ``queries`` names the ``@query`` methods
    the adapters read with."""

    target: type[Replicated]
    run_dir: Path
    nodes: int = 3
    clients: int = 4
    queries: tuple[str, ...] = ()
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    # Longer than a pause or a partition lasts: a request to a node that
    # comes back is answered (ok or fail) instead of ending indeterminate,
    # and every indeterminate operation costs the linearizability search.
    request_timeout_s: float = 5.0
    node_ids: list[int] = field(init=False)
    network: ProxyNetwork = field(init=False)
    processes: ProcessGroup = field(init=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.target, type) and issubclass(self.target, Replicated)):
            raise TypeError(f"target must be a quorum.replicated.Replicated subclass, got {self.target!r}")
        if not 1 <= self.nodes <= 9:
            raise ValueError(f"nodes must be 1 to 9, got {self.nodes}")
        self.run_dir = Path(self.run_dir)
        self.node_ids = list(range(1, self.nodes + 1))
        self.processes = ProcessGroup()
        self._spec, self._import_paths = _import_root(self.target)

    def __enter__(self) -> ReplicatedCluster:
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.network = ProxyNetwork(proxy_stderr=self.run_dir / "logs" / "proxy.log").open()
        try:
            for node_id in self.node_ids:
                self.network.add_node(node_id, "controller", zone=f"az{node_id}")
            for index in range(self.clients):
                self.network.add_client(f"client{index}")
            for node_id in self.node_ids:
                log = self.run_dir / "logs" / f"node{node_id}.log"
                self.processes.add(NodeProcess(node_id, "controller", self._argv(node_id), log)).start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.processes.stop_all()
        self.network.close()

    def _argv(self, node_id: int) -> Callable[[], list[str]]:
        def argv() -> list[str]:
            host, port = self.network.listen_address(node_id)
            command = [
                sys.executable, "-m", "jepsen_like.campaign.replicated_node",
                "--target", self._spec,
                "--node-id", str(node_id),
                "--voters", self.network.voters_arg(node_id),
                "--listen", f"{host}:{port}",
                "--data-dir", str(self.run_dir / "data" / f"node{node_id}"),
                "--election-timeout-ms", str(self.election_timeout_ms),
                "--fetch-timeout-ms", str(self.fetch_timeout_ms),
            ]  # fmt: skip
            for path in self._import_paths:
                command += ["--import-path", path]
            return self.network.run_in(node_id, command)

        return argv

    def client(self, index: int) -> _ReplicatedAdapter:
        return _ReplicatedAdapter(
            self.network.bootstrap_for(f"client{index % self.clients}"), frozenset(self.queries), self.request_timeout_s
        )

    async def wait_ready(self, timeout_s: float) -> None: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def isolate(self, node_id: int) -> dict[str, Any]: ...
    def heal(self) -> None: ...


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
            raise
        except QuorumClientError as error:  # refused for good before it took effect
            raise Failed(str(error)) from None


@dataclass
class ReplicatedCluster:
    """Node processes serving ``target`` (a ``Replicated`` subclass whose
    constructor takes no arguments), one proxy between every pair of
    members. A context manager; ``queries`` names the ``@query`` methods
    the adapters read with."""

    target: type[Replicated]
    run_dir: Path
    nodes: int = 3
    clients: int = 4
    queries: tuple[str, ...] = ()
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    # Longer than a pause or a partition lasts: a request to a node that
    # comes back is answered (ok or fail) instead of ending indeterminate,
    # and every indeterminate operation costs the linearizability search.
    request_timeout_s: float = 5.0
    node_ids: list[int] = field(init=False)
    network: ProxyNetwork = field(init=False)
    processes: ProcessGroup = field(init=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.target, type) and issubclass(self.target, Replicated)):
            raise TypeError(f"target must be a quorum.replicated.Replicated subclass, got {self.target!r}")
        if not 1 <= self.nodes <= 9:
            raise ValueError(f"nodes must be 1 to 9, got {self.nodes}")
        self.run_dir = Path(self.run_dir)
        self.node_ids = list(range(1, self.nodes + 1))
        self.processes = ProcessGroup()
        self._spec, self._import_paths = _import_root(self.target)

    def __enter__(self) -> ReplicatedCluster:
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.network = ProxyNetwork(proxy_stderr=self.run_dir / "logs" / "proxy.log").open()
        try:
            for node_id in self.node_ids:
                self.network.add_node(node_id, "controller", zone=f"az{node_id}")
            for index in range(self.clients):
                self.network.add_client(f"client{index}")
            for node_id in self.node_ids:
                log = self.run_dir / "logs" / f"node{node_id}.log"
                self.processes.add(NodeProcess(node_id, "controller", self._argv(node_id), log)).start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.processes.stop_all()
        self.network.close()

    def _argv(self, node_id: int) -> Callable[[], list[str]]:
        def argv() -> list[str]:
            host, port = self.network.listen_address(node_id)
            command = [
                sys.executable, "-m", "jepsen_like.campaign.replicated_node",
                "--target", self._spec,
                "--node-id", str(node_id),
                "--voters", self.network.voters_arg(node_id),
                "--listen", f"{host}:{port}",
                "--data-dir", str(self.run_dir / "data" / f"node{node_id}"),
                "--election-timeout-ms", str(self.election_timeout_ms),
                "--fetch-timeout-ms", str(self.fetch_timeout_ms),
            ]  # fmt: skip
            for path in self._import_paths:
                command += ["--import-path", path]
            return self.network.run_in(node_id, command)

        return argv

    def client(self, index: int) -> _ReplicatedAdapter:
        return _ReplicatedAdapter(
            self.network.bootstrap_for(f"client{index % self.clients}"), frozenset(self.queries), self.request_timeout_s
        )

    async def open_adapter(self, adapter: _ReplicatedAdapter) -> ReplicatedClient:
        """The adapter's connection, for :func:`run_own_campaign`."""
        adapter._client = ReplicatedClient(
            adapter.bootstrap, cluster_id=CLUSTER_ID if False else "pykraft",
            request_timeout_s=self.request_timeout_s, retry_timeout_s=self.request_timeout_s * 2,
        )  # fmt: skip
        return adapter._client

    async def wait_ready(self, timeout_s: float) -> None:
        """Until a query-free probe finds a leader. Raises ``TimeoutError``."""
        from quorum.client import QuorumClient

        with trio.move_on_after(timeout_s):
            while True:
                async with QuorumClient(self.network.bootstrap_for("client0"), request_timeout_s=0.5, retry_timeout_s=0.5) as probe:
                    try:
                        answer = await probe.describe()
                        if answer.leader_id is not None and answer.leader_id >= 0:
                            return
                    except QuorumClientError:
                        pass
                await trio.sleep(0.1)
        raise TimeoutError(f"no leader among nodes {self.node_ids} within {timeout_s} s")

    def kill(self, node_id: int) -> None:
        self.processes.nodes[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.processes.nodes[node_id].start()

    def pause(self, node_id: int) -> None:
        self.processes.nodes[node_id].pause()

    def resume(self, node_id: int) -> None:
        self.processes.nodes[node_id].resume()

    def isolate(self, node_id: int) -> dict[str, Any]:
        return self.network.isolate(node_id, clients=True).as_history_value()

    def heal(self) -> None:
        self.network.heal()
        for node in self.processes.nodes.values():
            if node.paused:
                node.resume()
            if not node.running:
                node.start()


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
            else:
                recorder.record(process, "ok", op["f"], None, result)


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
        else:
            fault = {**await trio.to_thread.run_sync(system.isolate, node_id), "fault_id": faults}
        recorder.nemesis(kind, {"phase": "start", "fault": fault})
        await trio.sleep(fault_s)
        if kind == "kill":
            await trio.to_thread.run_sync(system.restart, node_id)
        elif kind == "pause":
            await trio.to_thread.run_sync(system.resume, node_id)
        else:
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
    nemeses: tuple[str, ...] = OWN_NEMESES,
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

    Raises ``ValueError`` for an unknown nemesis or checker, ``TimeoutError``
    when the system shows no leader within ``ready_timeout_s``, and what the
    checker raises (``HistoryFormatError``).
    """
    unknown = sorted(set(nemeses) - set(OWN_NEMESES))
    if unknown:
        raise ValueError(f"unknown nemeses {unknown}; choose from {', '.join(OWN_NEMESES)}")
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
                result_box: list[int] = []

                async def faults_task() -> None:
                    result_box.append(await _nemesis_loop(system, tuple(nemeses), recorder, random.Random(f"{seed}/nemesis"), deadline, fault_s))

                nursery.start_soon(faults_task)
        faults = result_box[0] if nemeses else 0
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
