"""Settings no real deployment would give are refused where a user's
configuration enters (``QuorumConfig``, ``NodeConfig``, ``ConnectionLimits``,
``ControllerConfig``, ``BrokerConfig``), by name, with the value and the
range: a timer past an hour (``quorum.TIMER_MS_MAX``: past it check quorum,
elections or fencing never fire), a bool where an int is meant, a nan or
infinite factor, a byte limit past what the wire can carry. In process;
tests/cli/test_cli_errors.py runs the commands."""

from __future__ import annotations

import dataclasses
import math

import click
import pytest

from broker_agent import BrokerConfig
from quorum import (
    CHECK_QUORUM_FACTOR_MAX,
    FETCH_BYTES_MAX_LIMIT,
    SNAPSHOT_CHUNK_BYTES_MAX_LIMIT,
    TIMER_MS_MAX,
    TIMER_PROFILES,
    QuorumConfig,
    fetch_answer_bytes_max,
    timer_profile,
)
from quorum._log import MemoryLog
from quorum._messages import FetchResponse
from quorum._types import Entry, RecordKind, SnapshotId
from quorum.cli import node_config_or_usage_error
from quorum.runtime import ConnectionLimits, NodeConfig
from quorum.wire import FRAME_BYTES_MAX, NODE_LIMITS, encode_message
from registration import ControllerConfig

HUGE = 99999999999999999999999  # what the config file gave
VOTERS = "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"

# (setting, value, what the message says after the setting's name)
QUORUM_REFUSALS = [
    ("fetch_timeout_ms", HUGE, f"must be an int from one tick (10 ms) to 3600000 ms, got {HUGE}"),
    ("fetch_timeout_ms", TIMER_MS_MAX + 1, "to 3600000 ms, got 3600001"),
    ("election_timeout_ms", True, "must be an int from one tick (10 ms) to 3600000 ms, got True"),
    ("request_timeout_ms", 1000.0, "must be an int from one tick (10 ms) to 3600000 ms, got 1000.0"),
    # repr refuses an int this long: the message says how long it is.
    pytest.param("election_backoff_max_ms", 10**5000, "got an int of 16610 bits", id="election_backoff_max_ms-5001-digits"),
    ("tick_ms", False, "must be an int from 1 ms to 3600000 ms, got False"),
    ("retry_backoff_ms", -1, "must be an int from 0 ms to 3600000 ms, got -1"),
    ("fetch_max_wait_ms", math.nan, "must be an int from 0 ms to 3600000 ms, got nan"),
    ("unreachable_leader_wait_ms", True, "must be between one tick (10 ms) and election_timeout_ms (1000 ms), got True"),
    ("check_quorum_factor", math.nan, "must be a finite number from 1.0 to 100, got nan"),
    ("check_quorum_factor", math.inf, "must be a finite number from 1.0 to 100, got inf"),
    ("check_quorum_factor", 100.5, "must be a finite number from 1.0 to 100, got 100.5"),
    ("check_quorum_factor", 0.5, "must be a finite number from 1.0 to 100, got 0.5"),
    ("check_quorum_factor", True, "got True"),
    ("check_quorum_factor", "1.5", "got '1.5'"),
    ("fetch_bytes_max", 2**30, "must be an int from 1 bytes to 14680064 bytes, got 1073741824"),
    ("fetch_bytes_max", True, "got True"),
    ("snapshot_chunk_bytes_max", 8 * 1024 * 1024 + 1, "must be an int from 1 bytes to 8388608 bytes, got 8388609"),
    ("snapshot_retained_records", 1.5, "must be an int >= 0, got 1.5"),
    ("check_quorum", "false", "must be true or false, got 'false'"),
    ("pre_vote", 0, "must be true or false, got 0"),
]


@pytest.mark.parametrize(("setting", "value", "phrase"), QUORUM_REFUSALS)
def test_a_quorum_setting_no_deployment_would_give_is_refused_by_name(setting, value, phrase):
    with pytest.raises(ValueError) as refused:
        QuorumConfig(node_id=1, voters=(1, 2, 3), **{setting: value})
    message = str(refused.value)
    assert message.startswith(f"{setting} must be ") and phrase in message, message
    # The same from a node's settings (a [quorum] table): a usage error.
    with pytest.raises(click.UsageError) as refused:
        node_config_or_usage_error({"node_id": 1, "voters": VOTERS, "plaintext": True, "quorum": {setting: value}})
    assert str(refused.value) == message


def test_the_bounds_themselves_are_allowed_and_the_timer_profiles_are_within_them():
    edge = QuorumConfig(
        node_id=1,
        voters=(1,),
        election_timeout_ms=TIMER_MS_MAX,
        fetch_timeout_ms=TIMER_MS_MAX,
        request_timeout_ms=TIMER_MS_MAX,
        election_backoff_base_ms=TIMER_MS_MAX,
        election_backoff_max_ms=TIMER_MS_MAX,
        retry_backoff_ms=TIMER_MS_MAX,
        fetch_max_wait_ms=TIMER_MS_MAX - 1,
        check_quorum_factor=CHECK_QUORUM_FACTOR_MAX,
        fetch_bytes_max=FETCH_BYTES_MAX_LIMIT,
        snapshot_chunk_bytes_max=SNAPSHOT_CHUNK_BYTES_MAX_LIMIT,
    )
    assert edge.check_quorum_ms == CHECK_QUORUM_FACTOR_MAX * TIMER_MS_MAX
    assert QuorumConfig(node_id=1, voters=(1,), check_quorum_factor=2).check_quorum_factor == 2.0  # a TOML int
    for name in TIMER_PROFILES:
        assert all(value <= TIMER_MS_MAX for value in timer_profile(name).values()), name


def test_the_byte_bounds_are_what_the_wire_carries():
    # A snapshot chunk past the decoder's limit would be refused by every
    # follower; a Fetch answer at the bound fits the default frame.
    assert SNAPSHOT_CHUNK_BYTES_MAX_LIMIT == NODE_LIMITS.snapshot_chunk_bytes_max
    assert fetch_answer_bytes_max(FETCH_BYTES_MAX_LIMIT) <= FRAME_BYTES_MAX == NODE_LIMITS.frame_bytes_max
    # Worst case for the 9/8: empty records (the most per-record framing
    # for what they count), at the largest offsets and epochs.
    bytes_max = 64 * 1024
    first = 2**62
    log = MemoryLog(SnapshotId(first, 2**31 - 1), [Entry(first + i, 2**31 - 1, RecordKind.DATA, b"") for i in range(bytes_max)])
    records = tuple(log.slice(first, bytes_max=bytes_max))
    assert 0 < len(records) < len(log)
    answer = FetchResponse(src=1, dst=2, epoch=2**31 - 1, request_id=1, leader_id=1, records=records, high_watermark=first)
    limits = dataclasses.replace(NODE_LIMITS, frame_bytes_max=2**32 - 1)

    def size(message):
        return len(encode_message(message, correlation_id=1, cluster_id="c" * 64, limits=limits))

    records_bytes = size(answer) - size(dataclasses.replace(answer, records=()))
    assert bytes_max < records_bytes <= bytes_max * 9 // 8 + 5  # and the array's header
    assert size(answer) <= fetch_answer_bytes_max(bytes_max)


def test_a_fetch_answer_over_the_frame_limit_is_refused_before_the_node_starts():
    limits = ConnectionLimits(frame_bytes_max=4 * 1024 * 1024, small_frame_bytes_max=1024 * 1024)
    config = NodeConfig(node_id=1, voters={1: ("127.0.0.1", 9091)}, plaintext=True, connection_limits=limits)
    with pytest.raises(ValueError, match="fetch_bytes_max 8388608 needs Fetch answers of up to 9699328 bytes, over frame_bytes_max 4194304"):
        config.quorum_config()
    fits = dataclasses.replace(config, quorum={"fetch_bytes_max": 3 * 1024 * 1024})
    assert fits.quorum_config().fetch_bytes_max == 3 * 1024 * 1024


@pytest.mark.parametrize(
    ("setting", "value", "phrase"),
    [
        ("idle_timeout_ms", HUGE, f"idle_timeout_ms must be an int from 1 ms to 3600000 ms, got {HUGE}"),
        ("frame_deadline_ms", True, "frame_deadline_ms must be an int from 1 ms to 3600000 ms, got True"),
        ("write_backlog_bytes_max", 1.5, "write_backlog_bytes_max must be an int from 65536 bytes to 268435456 bytes, got 1.5"),
        # 4 meant as MiB: taken as 4 bytes before, and 4 GiB (one zero too
        # many) let one connection pin gigabytes.
        ("write_backlog_bytes_max", 4, "write_backlog_bytes_max must be an int from 65536 bytes to 268435456 bytes, got 4"),
        ("write_backlog_bytes_max", 4 * 2**30, "to 268435456 bytes, got 4294967296"),
        (
            "request_bytes_in_flight_max",
            4,
            "request_bytes_in_flight_max must be an int from small_frame_bytes_max, one request frame \\(1048576 bytes\\) "
            "to 268435456 bytes, got 4",
        ),
        ("request_bytes_in_flight_max", 4 * 2**30, "to 268435456 bytes, got 4294967296"),
        ("request_bytes_in_flight_max", True, "request_bytes_in_flight_max must be an int from .* got True"),
    ],
)
def test_a_connection_limit_no_deployment_would_give_is_refused_by_name(setting, value, phrase):
    with pytest.raises(ValueError, match=phrase):
        ConnectionLimits(**{setting: value})
    with pytest.raises(click.UsageError, match=phrase):
        node_config_or_usage_error({"node_id": 1, "voters": VOTERS, "plaintext": True, setting: value})


def test_the_per_connection_byte_bounds_themselves_are_allowed():
    from quorum.runtime._tcp import CONNECTION_BYTES_MAX_LIMIT, WRITE_BACKLOG_BYTES_MIN

    for request_bytes, backlog_bytes in ((NODE_LIMITS.small_frame_bytes_max, WRITE_BACKLOG_BYTES_MIN), (CONNECTION_BYTES_MAX_LIMIT,) * 2):
        limits = ConnectionLimits(request_bytes_in_flight_max=request_bytes, write_backlog_bytes_max=backlog_bytes)
        assert (limits.request_bytes_in_flight_max, limits.write_backlog_bytes_max) == (request_bytes, backlog_bytes)
    # The floor follows the largest request frame this node reads.
    with pytest.raises(ValueError, match="from small_frame_bytes_max, one request frame \\(8388608 bytes\\) to"):
        ConnectionLimits(small_frame_bytes_max=8 * 1024 * 1024)  # above the 4 MiB in flight by default
    assert ConnectionLimits(small_frame_bytes_max=64 * 1024, request_bytes_in_flight_max=64 * 1024)


def test_an_election_backoff_base_above_its_max_is_refused_naming_both():
    message = "election_backoff_base_ms (2000 ms) must not exceed election_backoff_max_ms (1000 ms)"
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        QuorumConfig(node_id=1, voters=(1,), election_backoff_base_ms=2000)
    with pytest.raises(click.UsageError) as refused:
        node_config_or_usage_error(
            {"node_id": 1, "voters": VOTERS, "plaintext": True, "quorum": {"election_backoff_base_ms": 2000}}
        )
    assert str(refused.value) == message
    # Equal is allowed (a fixed backoff), and so are the timer profiles'.
    assert QuorumConfig(node_id=1, voters=(1,), election_backoff_base_ms=1000).election_backoff_max_ms == 1000
    for name in TIMER_PROFILES:
        QuorumConfig(node_id=1, voters=(1,), **timer_profile(name))


@pytest.mark.parametrize(
    ("setting", "value", "phrase"),
    [
        ("snapshot_every_records", True, "snapshot_every_records must be an int >= 0, got True"),
        ("retention_ms", math.nan, "retention_ms must be an int >= 0 or None, got nan"),
        ("retention_bytes", "1GB", "retention_bytes must be an int >= 0 or None, got '1GB'"),
        # The command line made these node 1 (int()) before NodeConfig saw them.
        ("node_id", True, "node_id must be an int in 0-2147483647, got True"),
        ("node_id", 1.9, "node_id must be an int in 0-2147483647, got 1.9"),
    ],
)
def test_a_node_setting_of_the_wrong_type_is_refused_by_name(setting, value, phrase):
    with pytest.raises(click.UsageError, match=phrase):
        node_config_or_usage_error({"node_id": 1, "voters": VOTERS, "plaintext": True, setting: value})


@pytest.mark.parametrize(
    ("setting", "value", "phrase"),
    [
        ("session_timeout_ms", HUGE, f"session_timeout_ms must be an int from 1 ms to 3600000 ms, got {HUGE}"),
        ("heartbeat_interval_ms", True, "heartbeat_interval_ms must be an int from 1 ms to 3600000 ms, got True"),
        ("no_op_interval_ms", TIMER_MS_MAX + 1, "no_op_interval_ms must be an int from 0 ms to 3600000 ms, got 3600001"),
    ],
)
def test_a_controller_timer_no_deployment_would_give_is_refused_by_name(setting, value, phrase):
    with pytest.raises(ValueError, match=phrase):
        ControllerConfig(cluster_id="c", **{setting: value})


@pytest.mark.parametrize(
    ("setting", "value", "phrase"),
    [
        ("session_timeout_ms", HUGE, f"session_timeout_ms must be an int from 1 ms to 3600000 ms, got {HUGE}"),
        ("heartbeat_interval_ms", 2000.0, "heartbeat_interval_ms must be an int from 1 ms to 3600000 ms, got 2000.0"),
        ("shutdown_timeout_ms", TIMER_MS_MAX + 1, "shutdown_timeout_ms must be an int from 1 ms to 3600000 ms, got 3600001"),
        ("registration_timeout_ms", True, "registration_timeout_ms must be an int from 1 ms to 3600000 ms, got True"),
        ("staleness_bound_ms", math.nan, "staleness_bound_ms must be an int \\(ms\\) or None, got nan"),
        ("quorum", {"check_quorum_factor": math.inf}, "check_quorum_factor must be a finite number"),
    ],
)
def test_a_broker_timer_no_deployment_would_give_is_refused_by_name(setting, value, phrase):
    with pytest.raises(ValueError, match=phrase):
        BrokerConfig(broker_id=101, bootstrap={1: ("127.0.0.1", 9001)}, listen=("127.0.0.1", 0), plaintext=True, **{setting: value})
