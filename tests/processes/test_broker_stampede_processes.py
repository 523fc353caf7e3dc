"""Issue 15 part 4 on real processes: 150 brokers (bench/reconnect_bench.py's
fleet, speaking the real protocol) come back to the new controller at once
after the leader is killed with SIGKILL. The new leader keeps its
leadership, its voters' Fetches are served within the fetch timeout (its
own metric), writes commit, and every broker is heartbeating unfenced
again. Every wait is on a condition with a bound; nothing sleeps."""

import pytest

from bench.reconnect_bench import missed_targets, run

pytestmark = pytest.mark.processes

BROKERS = 150


async def test_a_broker_stampede_after_a_failover_starves_no_voter(tmp_path):
    result = await run(BROKERS, 0.5, str(tmp_path))

    assert missed_targets(result) == [], result
    assert result["new_leader"] != result["killed"]
    assert result["leadership_kept"]
    assert result["voter_fetch_gap_max_ms"] < result["fetch_timeout_ms"]
    assert result["writes_during"] >= 1
    assert result["registration_errors"] == {}
