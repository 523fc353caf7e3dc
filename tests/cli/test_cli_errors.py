"""Errors a user can cause (issue 18): each one, tried with the real
command, prints one or two lines (``Error: <what happened>`` and what to
do), exits with the status docs/operations.md lists, and shows a
traceback only with ``--debug``.

Every command runs as a subprocess of the console scripts next to this
interpreter, importing this tree (PYTHONPATH); every wait is a bounded poll
of a condition; every process is stopped when its test ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

import quorum.cli_errors
import quorum.storage
from quorum.cli_errors import (
    EXIT_BUG,
    EXIT_FAILED,
    EXIT_OS_ERROR,
    EXIT_STORAGE_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    describe_error,
    leaf_exceptions,
    root_cause,
)
from quorum.client import QuorumClient
from quorum.storage import EXIT_NOT_A_DATA_DIR, StorageOwnershipError
from loopback import free_ports

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
COMMAND_TIMEOUT_S = 60
# Slower timers than the defaults, so that a loaded machine does not make
# the two-voter cluster change leader between finding it and asking.
QUORUM_ARGS = ("--election-timeout-ms", "2000", "--fetch-timeout-ms", "4000")

pytestmark = pytest.mark.processes



def run(command: str, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / command), *map(str, args)], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=ENV
    )


def assert_reported(result: subprocess.CompletedProcess[str], exit_code: int, *phrases: str) -> list[str]:
    """The exit status, no traceback, and the error as one ``Error: ...``
    line and at most one more, holding every phrase; returns those lines."""
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.rstrip("\n").splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("Error: ")]
    assert len(starts) == 1, result.stderr
    report = lines[starts[0] :]
    assert 1 <= len(report) <= 2, report
    text = "\n".join(report)
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    return report


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 60.0) -> object:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


class Process:
    """A long-running command whose stdout and stderr go to a file."""

    def __init__(self, directory: Path, name: str, command: str, *args: object) -> None:
        self.output_path = directory / f"{name}.out"
        with open(self.output_path, "ab") as output:
            self.process = subprocess.Popen(
                [str(BIN / command), *map(str, args)], stdout=output, stderr=subprocess.STDOUT, env=ENV
            )

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout_s: float = 60.0) -> None:
        def seen() -> bool:
            assert self.process.poll() is None or text in self.output(), self.output()
            return text in self.output()

        wait_for(seen, repr(text), timeout_s)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=10)


def describe(port: int, timeout_s: float = 1.0):
    async def ask():
        async with QuorumClient([f"127.0.0.1:{port}"], retry_timeout_s=timeout_s, request_timeout_s=timeout_s) as client:
            return await client.describe()

    try:
        return trio.run(ask)
    except Exception:  # noqa: BLE001 - not up yet, or between leaders
        return None


class TwoVoters:
    """A two-voter ``kraft-quorum node`` cluster with data directories."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ports = dict(zip((1, 2), free_ports(2)))
        self.voters = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in self.ports.items())
        self.nodes = {
            node_id: Process(
                directory, f"node{node_id}", "kraft-quorum", "node", "--plaintext", "--node-id", node_id, "--voters", self.voters,
                "--data-dir", self.data_dir(node_id), *QUORUM_ARGS,
            )  # fmt: skip
            for node_id in self.ports
        }

    def data_dir(self, node_id: int) -> Path:
        return self.directory / f"data{node_id}"

    def leader(self) -> int:
        """The leader both voters name (waits for one)."""

        def agreed() -> int | None:
            views = [describe(port) for port in self.ports.values()]
            leaders = {None if view is None else view.leader_id for view in views}
            return leaders.pop() if len(leaders) == 1 else None

        return int(wait_for(agreed, "a leader both voters agree on"))


@pytest.fixture(scope="module")
def two_voters(tmp_path_factory) -> Iterator[TwoVoters]:
    cluster = TwoVoters(tmp_path_factory.mktemp("two_voters"))
    try:
        cluster.leader()
        yield cluster
    finally:
        for node in cluster.nodes.values():
            node.stop()


@pytest.fixture(scope="module")
def controller(tmp_path_factory) -> Iterator[int]:
    """One ``kraft-controller`` voter and no broker; yields its port."""
    (port,) = free_ports(1)
    process = Process(tmp_path_factory.mktemp("controller"), "controller", "kraft-controller", "--plaintext", "--node-id", 1,
                      "--voters", f"1@127.0.0.1:{port}")  # fmt: skip
    try:
        wait_for(lambda: (answer := describe(port)) is not None and answer.leader_id == 1, "the controller to lead")
        yield port
    finally:
        process.stop()


# --- the cluster cannot be reached, or is another cluster ----------------------


@pytest.mark.parametrize(
    "command",
    [
        ("kraft-quorum", "describe", "--status"),
        ("kraft-quorum", "write", "key", "value"),
        ("kraft-quorum", "add-voter", "--node-id", "4", "--directory-id", "0a1b2c3d", "--endpoint", "127.0.0.1:1"),
        ("kraft-quorum", "remove-voter", "--node-id", "3"),
        ("kraft-topics", "describe", "orders"),
        ("kraft-cluster", "describe"),
    ],
    ids=" ".join,
)
def test_a_cluster_nobody_listens_for_is_unreachable_within_the_timeout(command):
    (port,) = free_ports(1)
    result = run(*command, "--bootstrap", f"127.0.0.1:{port}", "--timeout-s", "0.5")
    assert_reported(
        result, EXIT_UNREACHABLE, "no node served the request within 0.5 s", f"127.0.0.1:{port}", "Check --bootstrap"
    )


def test_debug_adds_the_traceback_to_the_same_report():
    (port,) = free_ports(1)
    result = run("kraft-quorum", "--debug", "describe", "--bootstrap", f"127.0.0.1:{port}", "--timeout-s", "0.5")
    assert result.returncode == EXIT_UNREACHABLE
    assert "Traceback (most recent call last)" in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert error_lines == [f"Error: no node served the request within 0.5 s: all attempts to connect to 127.0.0.1:{port} failed."]


def test_a_wrong_cluster_id_says_which_cluster_answered(two_voters):
    result = run("kraft-quorum", "describe", "--bootstrap", f"127.0.0.1:{two_voters.ports[1]}", "--cluster-id", "other",
                 "--timeout-s", "5")  # fmt: skip
    assert_reported(result, EXIT_UNREACHABLE, "belongs to another cluster", "'pykraft'", "--cluster-id")


# --- a node that cannot start -----------------------------------------------------


def test_a_listen_port_in_use_is_one_sentence(two_voters):
    port = two_voters.ports[1]
    result = run("kraft-quorum", "node", "--plaintext", "--node-id", 1, "--voters", two_voters.voters)
    assert_reported(
        result, EXIT_OS_ERROR, f"cannot listen on 127.0.0.1:{port} (--listen): address already in use", "stop it"
    )


def test_a_listen_host_that_does_not_resolve_is_named(tmp_path):
    """``getaddrinfo``'s error alone ("Name or service not known") named
    neither the host nor the option."""
    (port,) = free_ports(1)
    result = run("kraft-quorum", "node", "--plaintext", "--node-id", 1, "--voters", f"1@nosuchhost.invalid:{port}",
                 "--data-dir", tmp_path / "n")  # fmt: skip
    assert_reported(
        result, EXIT_OS_ERROR, f"cannot listen on nosuchhost.invalid:{port} (--listen): the host name does not resolve",
        "getent hosts",
    )


def test_a_second_node_on_one_data_dir_is_refused_by_the_lock(two_voters):
    (port,) = free_ports(1)
    data_dir = two_voters.data_dir(1)
    result = run("kraft-quorum", "node", "--plaintext", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}", "--data-dir", data_dir)
    (line,) = assert_reported(result, EXIT_STORAGE_REFUSED, f"{data_dir} is already open in another process")
    assert line.endswith("stop that process, or give this one its own directory.")


@pytest.mark.parametrize("command", ["kraft-quorum", "kraft-broker"])
def test_an_event_log_in_a_missing_folder_says_to_create_it(tmp_path, command):
    (port,) = free_ports(1)
    event_log = tmp_path / "absent" / "events.jsonl"
    if command == "kraft-quorum":
        args = ["node", "--plaintext", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}"]
    else:  # it fails before it would reach the (absent) controller
        args = ["--plaintext", "--broker-id", 101, "--bootstrap", f"1@127.0.0.1:{port}", "--listen", "127.0.0.1:0"]
    result = run(command, *args, "--event-log", event_log)
    assert_reported(result, EXIT_OS_ERROR, f"cannot open {event_log}", f"mkdir -p {event_log.parent}")


@pytest.mark.parametrize("command", ["kraft-quorum", "kraft-broker"])
@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (("--listen", "127.0.0.1:99999"), "bad listen address '127.0.0.1:99999': expected HOST:PORT with a port from 0 to 65535"),
        (("--listen", "garbage"), "bad listen address 'garbage'"),
        (("--listen", ":0"), "bad listen address ':0'"),
        (("--metrics", "127.0.0.1:70000"), "bad metrics address '127.0.0.1:70000'"),
        (("--log-level", "BOGUS"), "Invalid value for '--log-level': 'BOGUS' is not one of"),
    ],
)
def test_a_listen_address_or_log_level_a_process_cannot_use_is_a_usage_error(command, flags, phrase):
    """Found by hand: a port past 65535 started a node or broker listening
    who knows where, "garbage" was "not enough values to unpack", ":0" and
    a negative port "the host name does not resolve", and a misspelt log
    level was silently INFO."""
    (port,) = free_ports(1)
    if command == "kraft-quorum":
        args = ["node", "--plaintext", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}"]
    else:
        args = ["--plaintext", "--broker-id", 101, "--bootstrap", f"1@127.0.0.1:{port}"]
        if flags[0] != "--listen":
            args += ["--listen", "127.0.0.1:0"]
    result = run(command, *args, *flags)
    assert_reported(result, EXIT_USAGE, phrase)


@pytest.mark.parametrize("command", ["kraft-quorum", "kraft-broker"])
def test_a_voter_id_given_twice_is_a_usage_error(command):
    """Found by hand: ``--voters 1@...:A,1@...:B`` started a node whose
    second entry silently replaced the first: a typo for ``2@...:B`` made
    a cluster of fewer voters than its operator listed."""
    first, second = free_ports(2)
    voters = f"1@127.0.0.1:{first},1@127.0.0.1:{second}"
    if command == "kraft-quorum":
        result = run(command, "node", "--plaintext", "--node-id", 1, "--voters", voters)
    else:
        result = run(command, "--plaintext", "--broker-id", 101, "--bootstrap", voters, "--listen", "127.0.0.1:0")
    assert_reported(result, EXIT_USAGE, f"voter 1 is given twice ('1@127.0.0.1:{second}')")


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (("--broker-id", "99999999999999999999"), "broker_id must be an int from 0 to 2147483647"),
        (("--broker-id", "5", "--rack", "r" * 2000), "rack must have 1 to 1024 characters, got 2000"),
        (("--broker-id", "5", "--rack", "r1\nfake line"), "rack must be printable, got 'r1\\nfake line'"),
        (("--broker-id", "5", "--cluster-id", "c" * 256), "cluster_id must be a non-empty str of at most 255 printable chars"),
    ],
)
def test_a_broker_the_controller_would_refuse_is_refused_before_it_starts(flags, phrase):
    """Found by hand: a 2,000-character rack was "an unexpected error, most
    likely a bug in pykraft" (exit 70) when the broker first registered, and
    a broker id past int32 started a broker."""
    (port,) = free_ports(1)
    result = run("kraft-broker", "--plaintext", "--bootstrap", f"1@127.0.0.1:{port}", "--listen", "127.0.0.1:0", *flags)
    assert_reported(result, EXIT_USAGE, phrase)


def test_a_cluster_id_the_wire_cannot_carry_is_refused_where_it_is_given(tmp_path):
    """Found by hand: a 300-character cluster id was formatted into a data
    directory, and a node started with it, then reached nobody (every frame
    carries it, and the wire takes at most 255 characters)."""
    (port,) = free_ports(1)
    cluster_id = "c" * 256
    result = run("kraft-quorum", "format", "--data-dir", tmp_path / "n", "--node-id", 1, "--cluster-id", cluster_id)
    assert_reported(result, EXIT_USAGE, "--cluster-id must be a non-empty str of at most 255 printable chars")
    assert not (tmp_path / "n").exists()
    result = run("kraft-quorum", "node", "--plaintext", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}",
                 "--cluster-id", cluster_id)  # fmt: skip
    assert_reported(result, EXIT_USAGE, "cluster_id must be a non-empty str of at most 255 printable chars")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"node_id = = 1\n", "is not valid TOML: Invalid value (at line 1, column 11)"),
        (b'node_id = 1\nname = "\xff"\n', "is not valid TOML: byte 20 is not UTF-8"),
        (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "a value nests too deeply"),
    ],
)
def test_a_config_file_that_is_not_toml_is_a_usage_error_naming_it(tmp_path, content, phrase):
    # Found by hand: each of these was "an unexpected error, most likely a
    # bug in pykraft" (exit 70) from every node command and --command-config.
    config = tmp_path / "node.toml"
    config.write_bytes(content)
    for command, args in (("kraft-quorum", ["node", "--config", config]), ("kraft-controller", ["--config", config])):
        assert_reported(run(command, *args), EXIT_USAGE, f"--config {config}", phrase)
    result = run("kraft-quorum", "describe", "--command-config", config, "--bootstrap", "1@127.0.0.1:1")
    assert_reported(result, EXIT_USAGE, f"--command-config {config}", phrase)


def _special_file(tmp_path: Path, kind: str) -> Path:
    if kind == "device":
        return Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "settings.fifo"
        os.mkfifo(path)
        return path
    path = tmp_path / "huge.toml"
    path.write_bytes(b"# " + b"x" * (quorum.cli_errors.CONFIG_BYTES_MAX + 1) + b"\n")
    return path


@pytest.mark.parametrize(
    ("kind", "phrase"),
    [("device", "is not a regular file"), ("fifo", "is not a regular file"), ("huge", "over the limit of 1048576")],
)
def test_a_config_file_that_is_a_device_a_fifo_or_huge_is_refused_at_once(tmp_path, kind, phrase):
    # Found by hand: --config /dev/zero read until memory ran out, and a FIFO
    # blocked the node in open() where SIGTERM could not end it.
    path = _special_file(tmp_path, kind)
    assert_reported(run("kraft-quorum", "node", "--config", path), EXIT_USAGE, f"--config {path}", phrase)
    result = run("kraft-quorum", "describe", "--command-config", path, "--bootstrap", "1@127.0.0.1:1")
    assert_reported(result, EXIT_USAGE, f"--command-config {path}", phrase)


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("grant everything\n", "line 1: unknown operation 'grant'"),
        (None, "is not a regular file"),  # a FIFO
        ("# " + "x" * (1024 * 1024) + "\n", "over the limit of 1048576"),
    ],
)
def test_an_acl_file_that_cannot_be_used_is_named_not_called_a_bug(tmp_path, content, phrase):
    # Found by hand: a typo in the ACL file was "an unexpected ValueError,
    # most likely a bug in pykraft" (exit 70) from every node command, and
    # an ACL file that was a FIFO hung the node where SIGTERM could not end it.
    acl = tmp_path / "acl.txt"
    if content is None:
        os.mkfifo(acl)
    else:
        acl.write_text(content)
    (port,) = free_ports(1)
    result = run("kraft-quorum", "certs", "--dir", tmp_path / "certs", "--nodes", "1")
    assert result.returncode == 0, result.stderr
    tls = ["--tls-ca", tmp_path / "certs" / "ca.pem", "--tls-cert", tmp_path / "certs" / "node-1.pem",
           "--tls-key", tmp_path / "certs" / "node-1-key.pem", "--acl-file", acl]  # fmt: skip
    for command, args in (("kraft-quorum", ["node"]), ("kraft-controller", [])):
        result = run(command, *args, "--node-id", 1, "--voters", f"1@127.0.0.1:{port}", *tls)
        assert_reported(result, EXIT_FAILED, "the ACL file cannot be used", phrase)


@pytest.mark.parametrize(
    ("setting", "phrase"),
    [
        ('voters = 5', 'voters must be a string "ID@HOST:PORT,..." or a table of ID = "HOST:PORT", got 5'),
        ('voters = "1@127.0.0.1:1"\nquorum = [1]', "quorum must be a table, got [1]"),
        ('voters = "1@127.0.0.1:1"\ndata_dir = 5', "data_dir must be a string, got 5"),
    ],
)
def test_a_setting_of_the_wrong_shape_in_a_config_file_is_named(tmp_path, setting, phrase):
    # Found by hand: `voters = 5` was "'int' object has no attribute
    # 'items'", exit 70; `data_dir = 5` named no setting.
    config = tmp_path / "node.toml"
    config.write_text(f"node_id = 1\n{setting}\n")
    for command, args in (("kraft-quorum", ["node", "--plaintext"]), ("kraft-controller", ["--plaintext"])):
        assert_reported(run(command, *args, "--config", config), EXIT_USAGE, phrase)


TIMER_PAST_AN_HOUR = "99999999999999999999999"


@pytest.mark.parametrize(
    ("setting", "phrase"),
    [
        (
            f"[quorum]\nfetch_timeout_ms = {TIMER_PAST_AN_HOUR}",
            f"fetch_timeout_ms must be an int from one tick (10 ms) to 3600000 ms, got {TIMER_PAST_AN_HOUR}",
        ),
        ("election_timeout_ms = true", "election_timeout_ms must be an int from one tick (10 ms) to 3600000 ms, got True"),
        ("[quorum]\ncheck_quorum_factor = nan", "check_quorum_factor must be a finite number from 1.0 to 100, got nan"),
        ("[quorum]\ncheck_quorum_factor = inf", "check_quorum_factor must be a finite number from 1.0 to 100, got inf"),
        ("[quorum]\nfetch_bytes_max = 2147483648", "fetch_bytes_max must be an int from 1 bytes to 14680064 bytes, got 2147483648"),
        (f"idle_timeout_ms = {TIMER_PAST_AN_HOUR}", f"idle_timeout_ms must be an int from 1 ms to 3600000 ms, got {TIMER_PAST_AN_HOUR}"),
        (
            "[quorum]\nelection_backoff_base_ms = 2000",
            "election_backoff_base_ms (2000 ms) must not exceed election_backoff_max_ms (1000 ms)",
        ),
        ("write_backlog_bytes_max = 4", "write_backlog_bytes_max must be an int from 65536 bytes to 268435456 bytes, got 4"),
    ],
)
def test_a_timer_factor_or_byte_limit_no_deployment_would_set_is_a_usage_error_naming_it(tmp_path, setting, phrase):
    # Found by reading: each was taken as given and the node ran, check
    # quorum (KAFKA-15489) never firing with the first; nan passed the
    # factor's `< 1.0` check.
    config = tmp_path / "node.toml"
    config.write_text(f'node_id = 1\nvoters = "1@127.0.0.1:1"\n{setting}\n')
    for command, args in (("kraft-quorum", ["node", "--plaintext"]), ("kraft-controller", ["--plaintext"])):
        assert_reported(run(command, *args, "--config", config), EXIT_USAGE, phrase)


@pytest.mark.parametrize(
    ("command", "args", "phrase"),
    [
        (
            "kraft-quorum",
            ["node", "--node-id", "1", "--voters", "1@127.0.0.1:1", "--plaintext", "--fetch-timeout-ms", TIMER_PAST_AN_HOUR],
            "fetch_timeout_ms must be an int from one tick (10 ms) to 3600000 ms",
        ),
        (
            "kraft-controller",
            ["--node-id", "1", "--voters", "1@127.0.0.1:1", "--plaintext", "--session-timeout-ms", TIMER_PAST_AN_HOUR],
            f"session_timeout_ms must be an int from 1 ms to 3600000 ms, got {TIMER_PAST_AN_HOUR}",
        ),
        (
            "kraft-broker",
            ["--broker-id", "101", "--bootstrap", "1@127.0.0.1:1", "--listen", "127.0.0.1:0", "--plaintext",
             "--session-timeout-ms", TIMER_PAST_AN_HOUR],
            f"session_timeout_ms must be an int from 1 ms to 3600000 ms, got {TIMER_PAST_AN_HOUR}",
        ),
    ],
)  # fmt: skip
def test_a_timer_flag_past_an_hour_is_a_usage_error_naming_it(command, args, phrase):
    # kraft-controller's own timers were checked outside the usage errors:
    # a refused one was reported as a bug (exit 70).
    assert_reported(run(command, *args), EXIT_USAGE, phrase)


@pytest.mark.parametrize(
    ("bootstrap", "phrase"),
    [
        ("garbage", "bad bootstrap server 'garbage': expected HOST:PORT or ID@HOST:PORT"),
        ("x@127.0.0.1:1", "bad bootstrap server 'x@127.0.0.1:1'"),
        ("1@127.0.0.1:99999", "a port from 1 to 65535"),
    ],
)
def test_a_bootstrap_that_names_no_server_is_a_usage_error(bootstrap, phrase):
    # Found by hand: "garbage" was a ValueError from deep in the client,
    # reported as a bug (exit 70), by every admin command.
    for command, args in (("kraft-topics", ["list"]), ("kraft-cluster", ["describe"]), ("kraft-quorum", ["describe"])):
        assert_reported(run(command, *args, "--bootstrap", bootstrap), EXIT_USAGE, "--bootstrap", phrase)


@pytest.mark.parametrize(
    ("option", "value"), [("--partitions", "-1"), ("--partitions", "99999999999999999999"), ("--replication-factor", "0")]
)
def test_a_topic_of_no_partitions_or_replicas_is_refused_before_any_wait(option, value):
    # Found by hand: these waited the whole --timeout-s for Online brokers,
    # then blamed the missing brokers.
    result = run("kraft-topics", "create", "t", "--bootstrap", "127.0.0.1:1", option, value, "--timeout-s", "30")
    assert_reported(result, EXIT_USAGE, option, "is not in the range")


def test_a_timeout_that_is_not_a_number_is_a_usage_error():
    # FloatRange lets "nan" through; it became "no node served the request
    # within nan s" after a wait.
    result = run("kraft-topics", "list", "--bootstrap", "127.0.0.1:1", "--timeout-s", "nan")
    assert_reported(result, EXIT_USAGE, "--timeout-s", "must be a number of seconds, got nan")


def test_a_node_without_data_dir_says_it_runs_in_memory(tmp_path):
    (port,) = free_ports(1)
    node = Process(tmp_path, "node", "kraft-quorum", "node", "--plaintext", "--node-id", 1, "--voters", f"1@127.0.0.1:{port}")
    try:
        node.wait_for_output("serving on port")
    finally:
        assert node.stop() == 0
    output = node.output()
    warning = "node 1 has no --data-dir: its log and votes live in memory and a restart forgets them"
    assert warning in output
    assert output.index(warning) < output.index("serving on port")


# --- inspection commands ----------------------------------------------------------


def test_describe_replication_asked_of_a_follower_follows_the_leader_or_says_to_ask_it(two_voters):
    leader = two_voters.leader()
    follower = 3 - leader
    follower_address = f"127.0.0.1:{two_voters.ports[follower]}"

    # Only the follower's HOST:PORT: it names the leader, but its address
    # is not known to the command.
    alone = run("kraft-quorum", "describe", "--replication", "--bootstrap", follower_address, "--timeout-s", "10")
    assert_reported(
        alone, EXIT_FAILED, f"node {leader} leads epoch", "only the leader knows replication progress",
        f"--bootstrap {leader}@HOST:PORT",
    )  # fmt: skip

    # The follower first, then every voter's ID@HOST:PORT: the leader answers.
    bootstrap = f"{follower}@{follower_address},{two_voters.voters}"
    followed = run("kraft-quorum", "describe", "--replication", "--bootstrap", bootstrap, "--timeout-s", "10")
    assert followed.returncode == 0, followed.stderr
    table, storage_lines = followed.stdout.splitlines()[1:-4], followed.stdout.splitlines()[-4:]
    rows = {int(line.split()[0]): line.split() for line in table}
    assert sorted(rows) == [1, 2]
    # The answering node (the leader), its own storage conditions, and the
    # voters it knows to be repairing (DescribeQuorum version 3).
    assert storage_lines == [
        f"AnsweredBy:    {leader}", "Disk:          ok", "Repairing:     no", "VotersRepairing: none",
    ], followed.stdout  # fmt: skip
    assert rows[leader][-1] == "Leader"
    assert all(row[1].isdigit() and row[3].isdigit() for row in rows.values()), followed.stdout  # no dashes


def test_topics_describe_of_an_unknown_topic_exits_1(controller):
    result = run("kraft-topics", "describe", "--bootstrap", f"1@127.0.0.1:{controller}", "no-such-topic")
    assert_reported(result, EXIT_FAILED, "no topic named 'no-such-topic'", "kraft-topics list")


def test_dump_log_of_a_folder_that_holds_no_log_exits_4(tmp_path):
    (tmp_path / "notes.txt").write_text("not a log")
    result = run("kraft-quorum", "dump-log", tmp_path)
    assert_reported(result, EXIT_NOT_A_DATA_DIR, f"{tmp_path} holds no log", "--data-dir")
    assert result.stdout == ""


# --- topics before brokers --------------------------------------------------------


def test_creating_a_topic_with_no_online_broker_waits_then_gives_the_reason(controller):
    result = run("kraft-topics", "create", "--bootstrap", f"1@127.0.0.1:{controller}", "--timeout-s", "1", "orders")
    assert "waiting up to 1 s for 1 Online broker(s): 0 of 0 registered are Online" in result.stderr
    assert_reported(
        result, EXIT_FAILED, "no topic created: replication factor 1 needs 1 Online broker(s)", "Start brokers (kraft-broker)"
    )


def test_creating_a_topic_waits_until_a_broker_is_online(tmp_path):
    controller_port, broker_port = free_ports(2)
    bootstrap = f"1@127.0.0.1:{controller_port}"
    controller = Process(tmp_path, "controller", "kraft-controller", "--plaintext", "--node-id", 1, "--voters", bootstrap)
    create = broker = None
    try:
        create = Process(tmp_path, "create", "kraft-topics", "create", "--bootstrap", bootstrap, "--timeout-s", 60, "orders")
        create.wait_for_output("waiting up to 60 s for 1 Online broker(s)")
        broker = Process(tmp_path, "broker", "kraft-broker", "--plaintext", "--broker-id", 101, "--bootstrap", bootstrap,
                         "--listen", f"127.0.0.1:{broker_port}")  # fmt: skip
        assert create.process.wait(timeout=COMMAND_TIMEOUT_S) == 0, create.output()
        assert "created orders (" in create.output()
    finally:
        for process in (create, broker, controller):
            if process is not None:
                process.stop()


# --- the mechanism itself ---------------------------------------------------------


class _Cancelled(BaseException):
    """Stands for ``trio.Cancelled``: a ``BaseException`` that is a
    consequence of another failure, never the cause."""


def test_root_cause_finds_the_real_error_in_nested_groups():
    cause = OSError(98, "Address already in use")
    nested = BaseExceptionGroup("outer", [_Cancelled(), BaseExceptionGroup("inner", [_Cancelled(), cause])])
    assert leaf_exceptions(nested)[-1] is cause
    assert root_cause(nested) is cause
    interrupted = BaseExceptionGroup("outer", [cause, KeyboardInterrupt()])
    assert isinstance(root_cause(interrupted), KeyboardInterrupt)


def test_a_refused_voter_change_says_why_and_what_to_do():
    from quorum import ErrorCode
    from quorum.client import VoterChangeRefusedError

    refused = describe_error(
        VoterChangeRefusedError("127.0.0.1:9091", ErrorCode.DUPLICATE_VOTER, "node 3 is already a voter")
    )
    assert refused.exit_code == EXIT_FAILED
    assert refused.format_message().splitlines() == [
        "127.0.0.1:9091 refused the voter change: DUPLICATE_VOTER: node 3 is already a voter.",
        "It is a voter already (describe shows the set); to replace its disk, remove-voter it first.",
    ]


def test_describe_error_maps_typed_errors_and_calls_anything_else_a_bug():
    refused = describe_error(ExceptionGroup("g", [StorageOwnershipError("data is someone else's: use another")]))
    assert (refused.exit_code, refused.format_message()) == (EXIT_STORAGE_REFUSED, "data is someone else's: use another.")
    bug = describe_error(ExceptionGroup("g", [ZeroDivisionError("division by zero")]))
    assert bug.exit_code == EXIT_BUG
    assert bug.format_message().splitlines() == [
        "unexpected ZeroDivisionError: division by zero.",
        "This is most likely a bug in pykraft: run the command again with --debug and report the traceback.",
    ]


def test_every_exit_status_is_in_the_operations_table():
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("## Errors and exit codes") :]
    documented = {int(status) for status in re.findall(r"^\| (\d+) \|", table, re.M)}
    statuses = {value for name, value in vars(quorum.cli_errors).items() if name.startswith("EXIT_")}
    statuses |= {value for name, value in vars(quorum.storage).items() if name.startswith("EXIT_")}
    assert statuses and statuses <= documented, sorted(statuses - documented)
