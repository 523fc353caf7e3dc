"""Timer profiles (``kraft-quorum node --timers NAME``, docs/operations.md,
"Timers") and the wait of a follower whose leader's process is gone
(``QuorumConfig.unreachable_leader_wait_ms``): the values, their validation,
and how the CLI layers a profile, flags and a ``[quorum]`` table. In
process: ``_node_config`` and click's runner, no node is started."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from quorum import TIMER_PROFILES, QuorumConfig, timer_profile
from quorum.cli import _node_config, main, node_config_or_usage_error

VOTERS = "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"


def settings(**more):
    return {"node_id": 1, "voters": VOTERS, "plaintext": True, **more}


def test_every_profile_makes_a_valid_config_and_fast_is_quicker_on_every_timer_it_sets():
    for name in TIMER_PROFILES:
        QuorumConfig(node_id=1, voters=(1, 2, 3), **timer_profile(name))
    fast, default = QuorumConfig(node_id=1, voters=(1, 2, 3), **timer_profile("fast")), QuorumConfig(node_id=1, voters=(1, 2, 3))
    assert timer_profile("default") == {}
    for name in timer_profile("fast"):
        assert getattr(fast, name) < getattr(default, name), name
    # A parked Fetch is not a lost one; one lost Fetch is retried in time.
    assert fast.fetch_max_wait_ms < fast.request_timeout_ms <= fast.fetch_timeout_ms // 2


def test_an_unknown_profile_is_refused_and_a_profile_is_a_copy():
    with pytest.raises(ValueError, match="unknown timer profile 'quick' \\(known: default, fast\\)"):
        timer_profile("quick")
    timer_profile("fast")["election_timeout_ms"] = 1
    assert TIMER_PROFILES["fast"]["election_timeout_ms"] == 500


def test_the_unreachable_leader_wait_defaults_to_a_quarter_of_the_election_timeout_and_is_bounded():
    assert QuorumConfig(node_id=1, voters=(1,)).unreachable_leader_wait_ms == 250
    assert QuorumConfig(node_id=1, voters=(1,), election_timeout_ms=20).unreachable_leader_wait_ms == 10  # a tick
    assert QuorumConfig(node_id=1, voters=(1,), unreachable_leader_wait_ms=1000).unreachable_leader_wait_ms == 1000
    for wait_ms in (5, 1001):
        with pytest.raises(ValueError, match="unreachable_leader_wait_ms must be between one tick"):
            QuorumConfig(node_id=1, voters=(1,), unreachable_leader_wait_ms=wait_ms)


def test_the_cli_applies_the_profile_then_the_flags_then_the_quorum_table():
    assert _node_config(settings()).quorum == {}
    assert _node_config(settings(timers="fast")).quorum == TIMER_PROFILES["fast"]
    layered = _node_config(settings(timers="fast", election_timeout_ms=800, quorum={"fetch_timeout_ms": 3000}))
    assert layered.quorum == {**TIMER_PROFILES["fast"], "election_timeout_ms": 800, "fetch_timeout_ms": 3000}
    config = layered.quorum_config()
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.unreachable_leader_wait_ms) == (800, 3000, 50)


def test_timers_that_cannot_work_together_are_a_usage_error_before_the_node_starts():
    # The fast profile parks a Fetch 250 ms: a 200 ms fetch timeout cannot work.
    with pytest.raises(click.UsageError, match="fetch_max_wait_ms must be below fetch_timeout_ms"):
        node_config_or_usage_error(settings(timers="fast", fetch_timeout_ms=200))
    with pytest.raises(click.UsageError, match="unknown timer profile"):
        node_config_or_usage_error(settings(timers="quick"))  # from a --config file


def test_the_timers_flag_offers_the_profiles():
    result = CliRunner().invoke(main, ["node", "--node-id", "1", "--voters", VOTERS, "--plaintext", "--timers", "quick"])
    assert result.exit_code == 2
    assert "'quick' is not one of 'default', 'fast'" in result.output
