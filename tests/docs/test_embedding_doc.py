"""docs/embedding.md cannot drift from the code (issue 18, item 5):

- every shell block (``$ command`` then its output) is run, and its output
  must match the page's with every number masked (ports, timings, which
  node won the election differ from run to run; the shape must not);
- every Python block compiles (top-level ``await`` and ``async with``
  allowed: most blocks are fragments of a trio program) and its imports
  resolve; a block marked ``<!-- excerpt: examples/x.py -->`` must appear
  verbatim in that file (which tests/examples runs);
- every public call of the embedding API is named on the page.
"""

from __future__ import annotations

import ast
import inspect
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from quorum import replicated as replicated_module
from quorum.client import QuorumClient
from quorum.replicated import Replicated
from quorum.runtime import QuorumNodeHandle

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "embedding.md"

_FENCE = re.compile(r"(?:^<!-- excerpt: (?P<excerpt>\S+) -->\n)?^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.M | re.S)


def blocks(lang: str) -> list[tuple[str | None, str]]:
    """(excerpt source or None, body) of every fenced block in ``lang``."""
    return [
        (match["excerpt"], match["body"]) for match in _FENCE.finditer(PAGE.read_text()) if match["lang"] == lang
    ]


def shell_blocks() -> list[tuple[str, list[str]]]:
    """(command, output lines) of every unlabelled block that starts with ``$ ``."""
    found = []
    for _, body in blocks(""):
        lines = body.splitlines()
        if lines and lines[0].startswith("$ "):
            assert not any(line.startswith("$ ") for line in lines[1:]), f"one command per block: {lines[0]}"
            found.append((lines[0][2:], lines[1:]))
    return found


def masked(lines: list[str]) -> list[str]:
    """Numbers masked; a list of (leader epoch, writer) pairs, whose length
    depends on which partitions the instance that dies happened to lead,
    reduced to its first pair."""
    result = []
    for line in lines:
        line = re.sub(r"\d+", "#", line)
        result.append(re.sub(r"\[\(#, #\)(?:, \(#, #\))*\]", "[(#, #)]", line))
    return result


def free_voters(count: int) -> str:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    voters = ",".join(f"{node_id}@127.0.0.1:{sock.getsockname()[1]}" for node_id, sock in enumerate(sockets, 1))
    for sock in sockets:
        sock.close()
    return voters


def test_the_page_has_shell_and_python_blocks():
    commands = [command for command, _ in shell_blocks()]
    assert ".venv/bin/python examples/replicated_counter.py" in commands
    assert len(commands) >= 5
    assert len(blocks("python")) >= 8


@pytest.mark.processes
@pytest.mark.parametrize("command, expected", shell_blocks(), ids=[command for command, _ in shell_blocks()])
def test_every_shell_block_prints_what_the_page_shows(command, expected):
    argv = command.split()
    assert argv[0] == ".venv/bin/python", f"a shell block runs an example with the project's Python: {command}"
    script = ROOT / argv[1]
    argv = [sys.executable, str(script), *argv[2:]]
    # Examples that take the voters as an argument default to fixed ports;
    # another test on this machine may hold them, so the run gets free ones.
    if "[VOTERS]" in script.read_text():
        argv.append(free_voters(3))
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    assert masked(result.stdout.splitlines()) == masked(expected), result.stdout


@pytest.mark.parametrize("excerpt, body", blocks("python"), ids=lambda value: str(value)[:40])
def test_every_python_block_compiles_and_its_imports_exist(excerpt, body):
    code = textwrap.dedent(body)
    tree = compile(code, str(PAGE), "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(PAGE), "exec"), {})
    if excerpt is not None:
        assert body in (ROOT / excerpt).read_text(), f"the block marked as an excerpt of {excerpt} is not in it"


def public_names(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def test_every_public_call_of_the_embedding_api_is_on_the_page():
    text = PAGE.read_text()
    named = set(re.findall(r"`[^`]*`", text))
    joined = " ".join(named)
    wanted = (
        set(replicated_module.__all__)
        | public_names(Replicated)
        | public_names(QuorumNodeHandle)
        | public_names(QuorumClient)
        | {"ReplicatedStateMachine", "check_records", "PROPOSAL_BYTES_MAX"}
    ) - {"READ_MODES"}
    missing = sorted(name for name in wanted if not re.search(rf"\b{re.escape(name)}\b", joined))
    assert not missing, f"docs/embedding.md names none of: {missing}"
