"""The project's layering, checked from the source (issue 13, part 3).

Every rule below reads the modules' syntax trees; nothing under test is
imported, except by the last test, which imports the simulator in a child
process that refuses what a browser lacks.

The rules (docs/architecture.md, "Layers"):

(a) dependencies point one way: quorum <- registration <- broker_agent <-
    jepsen_like, and the checker (jepsen_like.checker) imports nothing of
    the system it checks, nor of jepsen_like's other subpackages;
(b) every module is sans-IO unless ``HOSTS`` below names it or a package
    above it: it imports none of ``IO_MODULES`` and calls no function of the
    global ``random`` (a seeded ``random.Random(seed)`` is how a core gets
    randomness; ``random.Random()`` without a seed is refused too);
(c) a private module (``_x``) is imported only from inside the package that
    holds it; a subpackage counts as a package of its own, so its parent
    and its siblings go through its ``__init__`` like everyone else, while
    the subpackage may import its ancestors' private modules (it is inside
    them);
(d) there are no import cycles, function-local imports included;
(e) ``import jepsen_like.sim`` (with the names its ``__init__`` imports on
    first use, and the playground's modules) works without trio, fcntl,
    socket or threading (the simulator is meant to run in a browser under
    Pyodide).

An import under ``if TYPE_CHECKING:`` counts like any other: a layer that
needs another's types depends on it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The layers, lowest first: a package may import only from its own layer
#: and the ones before it.
LAYERS = ("quorum", "registration", "broker_agent", "jepsen_like")

#: The checker's own package: it imports nothing of the layers above, nor
#: of ``jepsen_like``'s other subpackages.
CHECKER = "jepsen_like.checker"

#: Modules and packages that do IO (a package stands for every module in
#: it). Everything else in the four layers is a sans-IO core and is held to
#: rule (b); a new module is a core until it is added here.
HOSTS = frozenset(
    {
        "quorum.runtime",  # the trio runtime: sockets, clocks, tasks
        "quorum.storage",  # files, fsync, locks
        "quorum.wire",  # frames on sockets; a per-thread packer
        "quorum.cli",
        "quorum.client",
        "quorum.replicated",  # a trio loop on a thread of its own
        "registration._service",  # the controller on the trio runtime
        "registration.cli",
        "registration.client",
        "broker_agent._agent",  # the broker on the trio runtime
        "broker_agent.cli",
        "broker_agent.client",
        "jepsen_like.campaign",  # real processes and clocks
        "jepsen_like.checker",  # files and Spark
        "jepsen_like.cli",
        "jepsen_like.nemesis",  # proxies, namespaces
        "jepsen_like.prometheus",  # a Prometheus process and its HTTP API
        "jepsen_like.report",  # reads results from disk
        "jepsen_like.sim.cli",  # a command line around the simulator
    }
)

#: What a sans-IO module never imports: IO, clocks, threads, OS entropy, metrics.
IO_MODULES = frozenset(
    {"trio", "asyncio", "time", "socket", "threading", "os", "secrets", "uuid", "fcntl", "selectors", "subprocess",
     "prometheus_client"}  # fmt: skip
)

#: The one name of ``random`` a core may use: a seeded, injected generator.
SEEDED_RANDOM = frozenset({"Random"})

#: What a browser under Pyodide cannot import (rule (e)); trio and fcntl
#: are refused wherever they are imported from, socket and threading only
#: when project code imports them (the standard library's ``logging`` uses
#: ``threading`` and is fine in Pyodide).
BROWSER_ABSENT_ANYWHERE = ("trio", "fcntl")
BROWSER_ABSENT_FROM_PROJECT = ("socket", "threading")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def where(self) -> str:
        return str(self.path.relative_to(ROOT))

    @property
    def package(self) -> str:
        """The package the module's own private siblings belong to."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    module: Module
    line: int
    target: str  # a dotted module name, resolved
    names: tuple[str, ...]  # for ``from target import a, b``; empty for ``import target``
    local: bool  # inside a function body


@cache
def project_modules() -> dict[str, Module]:
    modules = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(parts)
            modules[name] = Module(name, path, is_package)
    return modules


@cache
def syntax_tree(module: Module) -> ast.Module:
    return ast.parse(module.path.read_text(), filename=str(module.path))


def _walk(node: ast.AST, local: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        yield child, local
        inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _walk(child, inner)


@cache
def imports_of(module: Module) -> tuple[Import, ...]:
    found = []
    for node, local in _walk(syntax_tree(module)):
        if isinstance(node, ast.Import):
            found.extend(Import(module, node.lineno, alias.name, (), local) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(module, node.lineno, target, tuple(a.name for a in node.names), local))
    return tuple(found)


def project_targets(imported: Import) -> list[str]:
    """The project modules an import statement runs: ``from p import m``
    names module ``p.m`` when there is one, ``p`` itself for other names."""
    modules = project_modules()
    targets = [f"{imported.target}.{name}" for name in imported.names if f"{imported.target}.{name}" in modules]
    if imported.target in modules and (not imported.names or len(targets) < len(imported.names)):
        targets.append(imported.target)
    return targets


def all_imports() -> Iterator[Import]:
    for module in project_modules().values():
        yield from imports_of(module)


def is_host(name: str) -> bool:
    return any(name == host or name.startswith(host + ".") for host in HOSTS)


def layer_of(name: str) -> int | None:
    top = name.split(".")[0]
    return LAYERS.index(top) if top in LAYERS else None


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def report(problems: list[str], rule: str, advice: str) -> None:
    """Fail with one line per problem (file:line: what), then what to do."""
    if problems:
        pytest.fail(f"{rule}:\n  " + "\n  ".join(problems) + "\n" + textwrap.fill(advice, 88), pytrace=False)


# --- (a) layering ----------------------------------------------------------


def test_dependencies_point_one_way():
    problems = []
    for imported in all_imports():
        here = layer_of(imported.module.name)
        for target in project_targets(imported):
            there = layer_of(target)
            if there is not None and there > here:
                problems.append(
                    f"{imported.module.where}:{imported.line}: {imported.module.name} ({LAYERS[here]}) "
                    f"imports {target} ({LAYERS[there]}, a layer above it)"
                )
    report(
        problems,
        "rule (a), layering: quorum <- registration <- broker_agent <- jepsen_like",
        "A lower layer must not know the one above it. Move the shared piece down into the "
        "lower layer (and import it from there), or have the caller pass it in.",
    )


def test_the_checker_imports_nothing_of_the_system():
    problems = []
    for imported in all_imports():
        if not within(imported.module.name, CHECKER):
            continue
        outside = [
            target
            for target in dict.fromkeys([imported.target, *project_targets(imported)])
            if layer_of(target) is not None and not within(target, CHECKER) and target != "jepsen_like"
        ]
        problems.extend(f"{imported.module.where}:{imported.line}: {imported.module.name} imports {target}" for target in outside)
    report(
        problems,
        f"rule (a), the checker ({CHECKER}) imports nothing of the system it checks",
        "The checker reads histories, event logs and log dumps in the formats docs/checker.md "
        "describes, so that it can check other systems too. Read the file format instead of "
        "importing the code that writes it.",
    )


# --- (b) sans-IO cores -----------------------------------------------------


def test_hosts_name_existing_modules():
    modules = project_modules()
    assert sorted(host for host in HOSTS if host not in modules) == [], "HOSTS names a module that is gone"


def _random_names(module: Module) -> tuple[set[str], list[str]]:
    """The local names bound to the ``random`` module, and the problems
    found in ``from random import ...`` lines."""
    aliases, problems = set(), []
    for imported in imports_of(module):
        if imported.target == "random" and not imported.names:
            aliases.add("random")
        elif imported.target == "random":
            problems.extend(
                f"{module.where}:{imported.line}: from random import {name} (the global generator)"
                for name in imported.names
                if name not in SEEDED_RANDOM
            )
    for node in ast.walk(syntax_tree(module)):
        if isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == "random" and a.asname)
    return aliases, problems


def test_sans_io_modules_import_no_io_and_use_no_global_random():
    problems = []
    for module in project_modules().values():
        if is_host(module.name):
            continue
        for imported in imports_of(module):
            top = imported.target.split(".")[0]
            if top in IO_MODULES:
                problems.append(f"{module.where}:{imported.line}: {module.name} imports {imported.target}")
        aliases, random_problems = _random_names(module)
        problems.extend(random_problems)
        for node in ast.walk(syntax_tree(module)):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in aliases
            ):
                continue
            call = f"{module.where}:{node.lineno}: {module.name} calls {node.func.value.id}.{node.func.attr}()"
            if node.func.attr not in SEEDED_RANDOM:
                problems.append(f"{call} (the global generator)")
            elif not node.args and not node.keywords:
                problems.append(f"{call} without a seed (seeded from the OS)")
    report(
        problems,
        "rule (b), sans-IO: a core imports no IO, clock, thread or entropy module and uses no global random",
        "Cores are fed messages and logical ticks and return what to send and persist; the host "
        "does the IO. Take a random.Random(seed) from the caller instead of the global generator, "
        "ticks instead of clocks; or, if the module really is a host, add it to HOSTS in "
        "tests/test_layering.py.",
    )


# --- (c) private modules ---------------------------------------------------


def private_owner(target: str) -> str | None:
    """The package that owns ``target`` if it is, or is inside, a private
    module or package; ``None`` if it is public."""
    parts = target.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def test_no_package_imports_another_packages_private_module():
    problems = []
    for imported in all_imports():
        for target in project_targets(imported):
            owner = private_owner(target)
            if owner is not None and not within(imported.module.name, owner):
                problems.append(
                    f"{imported.module.where}:{imported.line}: {imported.module.name} imports {target}, "
                    f"private to {owner}"
                )
    report(
        problems,
        "rule (c), private modules: only the package that holds _x.py (and its subpackages) imports it",
        "Import the name from the owning package (its __init__ re-exports its public names once); "
        "if the name is not exported yet and others need it, export it there.",
    )


# --- (d) no cycles ---------------------------------------------------------


def import_graph() -> dict[str, dict[str, tuple[str, int]]]:
    """module -> {imported module -> (file, line) of the first such import}."""
    graph: dict[str, dict[str, tuple[str, int]]] = {name: {} for name in project_modules()}
    for imported in all_imports():
        for target in project_targets(imported):
            if target != imported.module.name:
                graph[imported.module.name].setdefault(target, (imported.module.where, imported.line))
    return graph


def strongly_connected(graph: dict[str, dict[str, tuple[str, int]]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def shortest_cycle(graph: dict[str, dict[str, tuple[str, int]]], component: list[str]) -> list[str]:
    """A shortest cycle through ``component[0]`` inside the component
    (breadth first), as the list of modules along it, first one repeated."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if successor in members and successor not in came_from:
                    came_from[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")


def test_strongly_connected_finds_a_cycle_and_only_cycles():
    graph = {"a": {"b": ("a.py", 1)}, "b": {"c": ("b.py", 1)}, "c": {"a": ("c.py", 1)}, "d": {"a": ("d.py", 1)}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    graph["a"]["c"] = ("a.py", 2)
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "c", "a"]
    del graph["c"]["a"]
    assert strongly_connected(graph) == []


def test_no_import_cycles():
    graph = import_graph()
    problems = []
    for component in strongly_connected(graph):
        cycle = shortest_cycle(graph, component)
        steps = [
            "{}:{}: {} imports {}".format(*graph[source][target], source, target)
            for source, target in zip(cycle, cycle[1:])
        ]
        problems.append(f"a cycle (one of {len(component)} modules that reach each other):\n    " + "\n    ".join(steps))
    report(
        problems,
        "rule (d), no import cycles (function-local imports count)",
        "Move what both sides need into a module that both import (a registry, the lower "
        "module), or pass it in as an argument; a function-local import only hides the cycle.",
    )


# --- (e) the simulator runs in a browser -----------------------------------

BROWSER_PROBE = """
import importlib.abc, os, sys, traceback

ROOT = {root!r}
ANYWHERE = {anywhere!r}
FROM_PROJECT = {from_project!r}
PROJECT = tuple(os.path.join(ROOT, layer) + os.sep for layer in {layers!r})


def importer_is_project_code():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(PROJECT)


class Browser(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ANYWHERE or (top in FROM_PROJECT and importer_is_project_code()):
            raise ImportError(f"{{name}} (absent in the browser)")
        return None


sys.meta_path.insert(0, Browser())
sys.path.insert(0, ROOT)
try:
    import jepsen_like.sim
    # the names its __init__ imports on first use, and what the playground page imports
    for name in jepsen_like.sim.__all__:
        getattr(jepsen_like.sim, name)
    import jepsen_like.sim._playground, jepsen_like.sim._lessons  # noqa: F401, E401
except ImportError as error:
    steps = [
        f"{{os.path.relpath(frame.filename, ROOT)}}:{{frame.lineno}}"
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename.startswith(PROJECT)
    ]
    print(" -> ".join(steps) + f" imports {{error}}")
    sys.exit(1)
"""


def test_the_simulator_imports_without_trio_fcntl_sockets_or_threads():
    probe = BROWSER_PROBE.format(
        root=str(ROOT),
        anywhere=BROWSER_ABSENT_ANYWHERE,
        from_project=BROWSER_ABSENT_FROM_PROJECT,
        layers=LAYERS,
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    if result.returncode != 0:
        report(
            [result.stdout.strip() or result.stderr.strip()],
            "rule (e), the simulator runs in a browser: `import jepsen_like.sim` needs what Pyodide lacks",
            "Keep trio, fcntl, sockets and threads out of every module the simulator imports: import the "
            "sans-IO piece from the module that holds it rather than through a package whose __init__ "
            "pulls in its host, or move the IO import into the host module.",
        )
