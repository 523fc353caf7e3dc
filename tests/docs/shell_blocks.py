"""The shell blocks of the documentation, and a shell session to run them.

A *shell block* is a fenced block labelled ``sh``, ``bash``, ``shell`` or
``console``, or an unlabelled one with a line that starts with ``$ ``:

- in a ``$`` transcript each ``$ command`` is followed by the output the page
  shows for it; ``...`` on a line of its own stands for lines left out;
- any other shell block is a list of commands, one a line (``\\`` joins
  lines), whose output the page does not show.

A block whose first line is ``# not run by tests: REASON`` is not run; the
reader sees the reason too. Every other block is run, in page order, by
one bash session per page (tests/docs/test_shell_blocks.py), so that the
servers a page starts serve its later blocks:

- the session runs in a fresh directory holding links to the checkout's
  ``.venv``, ``docs``, ``examples`` and ``tests``, with ``.venv/bin`` first
  on ``PATH`` (pages write ``kraft-quorum`` for ``.venv/bin/kraft-quorum``);
- every loopback port the page's blocks name (``127.0.0.1:PORT``) is
  replaced, wherever the number appears in them, by a port free on this
  machine (``tests.loopback.free_ports``): the same page port, the same
  free port, across the page. Ports below 1000 stay: a page that needs a
  port nobody listens on names port 9, since a port free at the start may
  be taken by another process by the time the page uses it;
- a command sent to the background (a trailing ``&``, optionally followed
  by ``NAME=$!``) whose output the page does not redirect writes it to
  ``background.log``; every process the session started is stopped at the
  end of the page (SIGTERM to the session's process group, SIGKILL after a
  bounded wait);
- ``<!-- docs-test: ready PORT ... -->`` just above a block: before a
  foreground command that follows background ones in that block, and at
  the block's end, the session waits (bounded) until every one of those
  page ports accepts connections;
- a command exits 0 unless its trailing comment says ``exit N``;
- a transcript's output must match the page's line for line with every
  number, UUID and topic id masked and runs of spaces collapsed, as
  multisets (which node leads, and so which row of a table says
  ``Leader``, may differ from run to run); with ``...`` the page's lines
  need only be among the output's.
"""

from __future__ import annotations

import collections
import os
import re
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopback import free_ports

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
SHELL_LANGS = ("sh", "bash", "shell", "console")
NOT_RUN = re.compile(r"^# not run by tests: (?P<reason>\S.*)$")
LINKED = (".venv", "docs", "examples", "tests")

_FENCE = re.compile(
    r"(?P<directives>(?:^<!-- docs-test: [^\n]*-->\n)*)^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```$",
    re.M | re.S,
)
_DIRECTIVE = re.compile(r"<!-- docs-test: (?P<words>[^\n]*?) -->")
_PORT = re.compile(r"127\.0\.0\.1:(\d{4,5})\b")
_BACKGROUND = re.compile(r"(?<![&|>])&(?P<tail>\s*(?:[A-Za-z_]\w*=\$!)?\s*(?:#.*)?)$")
_EXIT = re.compile(r"#.*\bexit (\d+)\b")
_JOB_REPORT = re.compile(r"^bash: line \d+: +\d+ (?:Killed|Terminated) .*\n", re.M)


@dataclass
class Command:
    text: str  # as the page has it
    expected: list[str] | None  # a transcript's output lines, None when the page shows none

    @property
    def exit_status(self) -> int:
        match = _EXIT.search(self.text)
        return int(match.group(1)) if match else 0


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    directives: list[list[str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def not_run_reason(self) -> str | None:
        first = self.body.splitlines()[0] if self.body.strip() else ""
        match = NOT_RUN.match(first)
        return match["reason"] if match else None

    @property
    def ready_ports(self) -> list[int]:
        return [int(port) for words in self.directives if words[:1] == ["ready"] for port in words[1:]]

    def commands(self) -> list[Command]:
        lines = self.body.splitlines()
        if any(line.startswith("$ ") for line in lines):
            commands: list[Command] = []
            for line in lines:
                if line.startswith("$ "):
                    commands.append(Command(line[2:], []))
                elif commands:
                    commands[-1].expected.append(line)  # type: ignore[union-attr]
                else:
                    raise ValueError(f"{self.where}: a transcript starts with output, not a $ command: {line}")
            return commands
        joined = re.sub(r"\\\n\s*", " ", self.body)
        return [Command(line, None) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def shell_blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        lang, body, indent = match["lang"], match["body"], match["indent"]
        if indent:
            body = "".join(line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines(True))
        if lang in SHELL_LANGS or (lang == "" and re.search(r"^\$ ", body, re.M)):
            directives = [m["words"].split() for m in _DIRECTIVE.finditer(match["directives"])]
            line = text.count("\n", 0, match.start("indent")) + 1
            found.append(Block(page, line, lang, body, directives))
    return found


def page_ports(blocks: list[Block]) -> list[int]:
    ports = {int(port) for block in blocks for port in _PORT.findall(block.body)}
    ports |= {port for block in blocks for port in block.ready_ports}
    return sorted(ports)


def substitute(text: str, port_map: dict[int, int]) -> str:
    for page_port, port in port_map.items():
        text = re.sub(rf"\b{page_port}\b", str(port), text)
    return text


def to_background_log(command: str) -> str:
    """``command`` with an unredirected trailing ``&`` sent to background.log."""
    match = _BACKGROUND.search(command)
    if match is None:
        return command
    head = command[: match.start()]
    last = re.split(r"[;&|]", head)[-1]
    if ">" in last:
        return command
    return f"{head} >>background.log 2>&1 &{match['tail']}"


def is_background(command: str) -> bool:
    return _BACKGROUND.search(command) is not None


_MASKS = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"(?<![\w-])(?=[\w-]*[A-Z])(?=[\w-]*\d)[A-Za-z0-9_-]{22}(?![\w-])"), "<topic-id>"),
    (re.compile(r"\b0x[0-9a-f]+\b"), "#"),
    (re.compile(r"\d+(?:\.\d+)?"), "#"),
    (re.compile(r"\s+"), " "),
)


def masked(line: str) -> str:
    for pattern, replacement in _MASKS:
        line = pattern.sub(replacement, line)
    return line.strip()


def output_mismatch(expected: list[str], actual: str) -> str | None:
    """Why ``actual`` is not what the page shows, or None. ``...`` inside a
    line stands for any text there (an abbreviated line)."""
    elided = any(line.strip() == "..." for line in expected)
    shown = [masked(line) for line in expected if line.strip() != "..."]
    have = collections.Counter(masked(line) for line in actual.splitlines())
    want = collections.Counter(line for line in shown if "..." not in line)
    missing = list((want - have).elements())
    extra = have - want
    for line in (line for line in shown if "..." in line):
        pattern = re.compile(".*".join(re.escape(part) for part in line.split("...")))
        match = next((candidate for candidate in extra if extra[candidate] and pattern.fullmatch(candidate)), None)
        if match is None:
            missing.append(line)
        else:
            extra[match] -= 1
    extra = +extra
    if missing or (extra and not elided):
        shown_extra = sorted(extra.elements()) if not elided else "(elided)"
        return f"lines the page shows but the run did not print: {sorted(missing)}; printed but not shown: {shown_extra}"
    return None


class ShellSession:
    """One bash process, in its own process group, that runs commands one
    after another in ``workdir`` (variables and background jobs persist)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        for name in LINKED:
            (workdir / name).symlink_to(ROOT / name)
        env = dict(os.environ)
        env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(ROOT)
        # One width whoever runs the tests: rich wraps tables and long lines at
        # it, and the pages' transcripts were taken at 120 columns (a
        # pytest-xdist worker inherits COLUMNS=80 from its start-up).
        env["COLUMNS"] = "120"
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._count = 0

    def run(self, command: str, timeout_s: float) -> tuple[int, str]:
        """(exit status, output) of ``command``; raises TimeoutError."""
        self._count += 1
        output = self.workdir / f".output-{self._count}"
        marker = f"__docs_test_done_{self._count}__"
        script = f"{{ {command}\n}} >{output} 2>&1 </dev/null\necho {marker} $?\n"
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(script.encode())
        self.process.stdin.flush()
        received = b""
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while marker.encode() not in received or not received.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no end within {timeout_s} s: {command}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise RuntimeError(f"the shell exited running: {command}")
                received += chunk
        status = int(received.decode().rsplit(marker, 1)[1].split()[0])
        # bash reports a background job that a signal ended when it next
        # looks (an interactive shell's "[1]+ Killed"): not the command's output.
        text = _JOB_REPORT.sub("", output.read_text(errors="replace"))
        return status, text

    def background_log(self) -> str:
        """The end of every log the page's background processes wrote."""
        logs = sorted(self.workdir.glob("*.log"))
        return "\n".join(f"--- {path.name}:\n{path.read_text(errors='replace')[-3000:]}" for path in logs) or "(no logs)"

    def close(self, timeout_s: float = 20) -> None:
        """Stop every process the session started (its process group)."""
        group = self.process.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and _group_alive(group):
                self.process.poll()  # reap the shell: a zombie still counts as in the group
                time.sleep(0.05)
            if not _group_alive(group):
                break
        self.process.wait(timeout=timeout_s)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for_ports(ports: list[int], timeout_s: float) -> list[int]:
    """Wait until every port accepts a connection on 127.0.0.1; the ports
    that still did not when ``timeout_s`` ran out."""
    deadline = time.monotonic() + timeout_s
    waiting = list(ports)
    while waiting and time.monotonic() < deadline:
        for port in list(waiting):
            with socket.socket() as sock:
                sock.settimeout(1)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    waiting.remove(port)
        if waiting:
            time.sleep(0.1)
    return waiting


def run_page(page: Path, workdir: Path, command_timeout_s: float = 120) -> list[str]:
    """Run every shell block of ``page`` that is not marked; the failures."""
    blocks = [block for block in shell_blocks(page) if block.not_run_reason is None]
    ports = page_ports(blocks)
    port_map = dict(zip(ports, free_ports(len(ports))))
    failures: list[str] = []
    session = ShellSession(workdir)
    try:
        for block in blocks:
            pending_background = False
            ready = [port_map[port] for port in block.ready_ports]
            for command in block.commands():
                if pending_background and not is_background(command.text) and ready:
                    late = wait_for_ports(ready, command_timeout_s)
                    assert not late, f"{block.where}: ports {late} never listened:\n{session.background_log()}"
                    pending_background = False
                text = to_background_log(substitute(command.text, port_map))
                pending_background |= is_background(command.text)
                status, output = session.run(text, command_timeout_s)
                if status != command.exit_status:
                    failures.append(
                        f"{block.where}: `{command.text}` exited {status}, not {command.exit_status}:\n{output}"
                    )
                elif command.expected is not None:
                    why = output_mismatch(command.expected, output)
                    if why:
                        failures.append(f"{block.where}: `{command.text}`: {why}\n--- output:\n{output}")
            if pending_background and ready:
                late = wait_for_ports(ready, command_timeout_s)
                assert not late, f"{block.where}: ports {late} never listened:\n{session.background_log()}"
    finally:
        session.close()
    return failures
