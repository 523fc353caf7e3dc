"""Short real campaigns: 3 kraft-controller and 3 kraft-broker processes
behind the proxy network, real faults, the mixed workload (registers,
topics, synthetic brokers; reads through the controller and the brokers),
the history checked by the Spark job. The harness and the checker must
find the bug they exist for, and nothing when it is fixed.

Each campaign reuses the session's Spark (tests/conftest.py) and prints
its phase timings, so a slow run shows where the time went."""

import json

import pytest

from jepsen_like.campaign import Campaign, CampaignOptions

pytestmark = pytest.mark.processes


async def run(tmp_path, spark, **overrides):
    options = CampaignOptions(store=tmp_path / "store", quiesce_s=2.0, **overrides)
    result = await Campaign(options, spark=spark).run()
    print(f"{options.scenario}: ops {result.ops}, faults {result.faults_by_kind}, phases {result.phase_seconds}")
    return result


def results_of(result):
    return json.loads((result.run_dir / "results.json").read_text())


@pytest.mark.long  # about a minute on 2 cores, with Spark: make soak (make run runs a chaos campaign with Spark too)
async def test_a_chaos_campaign_with_partitions_kills_and_pauses_is_valid(tmp_path, spark):
    result = await run(tmp_path, spark, scenario="chaos", time_limit_s=25, seed=3)
    assert result.checker_error is None
    assert result.faults >= 3
    # Work happened (about 9,000 ok operations on a quiet machine; the bound
    # only says the workload ran, so a loaded machine passes too).
    assert result.ops["ok"] > 100
    assert result.valid is True, result.anomalies
    results = results_of(result)
    assert results["checks"]["linearizability"]["status"] == "pass"
    stats = results["stats"]
    assert stats["log_dump_records"] > 0 and stats["role_events"] > 0
    # The brokers were there and were read from; their events reached the checker.
    assert stats["ok_broker_reads"] > 0 and stats["broker_state_events"] >= 3 and stats["broker_requests"] > 0
    assert result.report is not None and "VALID" in result.report.read_text()


@pytest.mark.long  # about 45 s on 2 cores: make soak (make test budget, 14 min 47 s in CI2); the simulator's zombie-leader scenarios and the checker's stale-read tests stay in make test
async def test_the_zombie_leader_without_check_quorum_serves_stale_reads_and_the_checker_finds_them(tmp_path):
    """KAFKA-15489 on real processes: with check quorum off, the isolated
    leader keeps answering leader-local reads that miss writes the new
    leader acknowledged long before. Checked by the reference checker (the
    Spark job's twin, held to the same verdicts by tests/checker): make run
    and the long chaos campaign run the Spark job on real histories."""
    result = await run(
        tmp_path, None, scenario="zombie-leader", time_limit_s=25, check_quorum=False, read_mode="leader-local",
        checker="reference",
    )  # fmt: skip
    assert result.checker_error is None
    assert result.valid is False
    assert result.anomalies.get("stale-read", 0) > 0
    witnesses = results_of(result)["checks"]["stale-read"]["witnesses"]
    assert witnesses, "the stale reads come with the operations that witness them"


# The named broker scenarios, short, checked by the reference checker (the
# Spark job's pure-Python twin, which tests/checker holds to the same
# verdicts): seconds instead of a JVM per test.


def node_events(result):
    return [json.loads(line) for line in (result.run_dir / "node-events.jsonl").read_text().splitlines()]


async def test_fast_bounces_of_brokers_get_new_epochs_and_nothing_is_acted_on_with_an_old_one(tmp_path):
    """Seed 000: each bounce (kill -9 during a controlled shutdown, or while
    running, and an immediate restart) registers a new, larger broker
    epoch; the checker finds no stale-epoch request acted on and no
    epoch regression."""
    result = await run(tmp_path, None, scenario="fast-bounce", time_limit_s=18, seed=5, checker="reference")
    assert result.checker_error is None
    assert result.faults_by_kind.get("fast-bounce", 0) >= 1
    assert result.valid is True, result.anomalies
    # Each registration is logged twice: by the broker, and by the active
    # controller when the record commits. Per writer, epochs only grow.
    registrations = [e for e in node_events(result) if e["kind"] == "broker_registration"]
    assert len(registrations) > 3, "a bounced broker registers again"
    for writer, broker_id in {(e["node"], e["broker_id"]) for e in registrations}:
        epochs = [
            e["broker_epoch"]
            for e in sorted(registrations, key=lambda e: e["time"])
            if (e["node"], e["broker_id"]) == (writer, broker_id)
        ]
        assert epochs == sorted(set(epochs)), f"broker {broker_id}, as logged by node {writer}: epochs {epochs}"
    checks = results_of(result)["checks"]
    assert checks["stale-broker-epoch"]["status"] == "pass" and checks["broker-epoch-regression"]["status"] == "pass"


async def test_a_broker_cut_from_the_controllers_fences_itself_and_serves_nothing_stale(tmp_path):
    """Seed 003 case 2: cut from every controller but not from its clients,
    the broker goes fenced within its session and refuses reads; no read it
    answered is older than the staleness bound, none came while fenced."""
    result = await run(tmp_path, None, scenario="broker-cut-from-controller", time_limit_s=16, seed=2, checker="reference")
    assert result.checker_error is None
    assert result.faults >= 1
    assert result.valid is True, result.anomalies
    states = [e["state"] for e in node_events(result) if e["kind"] == "broker_state" and e["broker_id"] == "101"]
    assert states.count("fenced") >= 2, f"the cut broker fenced itself after registering: {states}"
    checks = results_of(result)["checks"]
    assert checks["fenced-broker-read"]["status"] == "pass" and checks["stale-read"]["status"] == "pass"
    refused = [
        json.loads(line) for line in (result.run_dir / "history.jsonl").read_text().splitlines()
        if '"BROKER_NOT_AVAILABLE' in line
    ]
    assert refused, "clients that still reached the cut broker were refused"


def history_of(result):
    return [json.loads(line) for line in (result.run_dir / "history.jsonl").read_text().splitlines()]


@pytest.mark.long  # about a minute on 2 cores: make soak (the hostile kinds one by one: tests/nemesis, tests/runtime)
async def test_hostile_clients_at_the_members_ports_lose_nothing_and_writes_go_on(tmp_path):
    """Issue 15 part 6: garbage, oversize, stalled, pipelined, forged-field
    and flood traffic at the members' own ports while the workload runs.
    Every kind is in the history as a nemesis fault with its target and
    what it sent; the history is valid; writes commit during the attacks."""
    result = await run(tmp_path, None, scenario="hostile-clients", time_limit_s=30, seed=11, brokers=1, checker="reference")
    assert result.checker_error is None
    assert result.valid is True, result.anomalies
    history = history_of(result)
    starts = [e for e in history if e["process"] == "nemesis" and isinstance(e["value"], dict) and e["value"].get("phase") == "start"]
    ends = [e for e in history if e["process"] == "nemesis" and isinstance(e["value"], dict) and e["value"].get("phase") == "end"]
    kinds = {e["value"]["fault"]["kind"] for e in starts}
    assert {"garbage", "oversize", "stalled", "pipelined", "forged-field", "flood"} <= kinds
    assert len(ends) == len(starts)
    for end in ends:
        fault = end["value"]["fault"]
        assert end["f"] == f"hostile-{fault['kind']}" and fault["node"] in (1, 2, 3, 101)
        # The attacks reached the node: connections were made, bytes sent.
        assert sum(stats["connections"] for stats in fault["stats"]) > 0, fault
    # Writes kept committing while the attacks ran.
    windows = [(s["time"], e["time"]) for s, e in zip(starts, ends)]
    ok_writes = [e["time"] for e in history if e["process"] != "nemesis" and e["type"] == "ok" and e["f"] in ("write", "cas")]
    during = [t for t in ok_writes if any(a <= t <= b for a, b in windows)]
    assert len(during) > 10, (len(during), len(ok_writes))
    assert result.report is not None and "hostile-" in result.report.read_text()


@pytest.mark.long  # about 80 s on 2 cores: make soak (the attacks one by one over TLS: tests/nemesis/test_hostile.py)
async def test_hostile_clients_over_tls_run_every_window_without_and_with_a_certificate(tmp_path):
    """With --tls each hostile window runs twice at one member: without a
    certificate (refused at the handshake: nothing answered in frames,
    nothing refused by authorization) and with the run's client/hostile
    certificate (past the handshake: answers in frames, the impostor's and
    the unknown voter's member-only messages refused by authorization).
    The history stays valid."""
    result = await run(tmp_path, None, scenario="hostile-clients", time_limit_s=55, seed=7, brokers=1, checker="reference", tls=True)
    assert result.checker_error is None
    assert result.valid is True, result.anomalies
    ends = [
        e["value"]["fault"] for e in history_of(result)
        if e["process"] == "nemesis" and isinstance(e["value"], dict) and e["value"].get("phase") == "end"
    ]  # fmt: skip
    plain = [fault for fault in ends if fault["authenticated"] is False]
    certified = [fault for fault in ends if fault["authenticated"] is True]
    assert {fault["kind"] for fault in certified} == {"garbage", "oversize", "stalled", "pipelined", "forged-field", "flood"}
    assert [(f["kind"], f["node"]) for f in plain][: len(certified)] == [(f["kind"], f["node"]) for f in certified]
    for fault in plain:
        assert all(stats["error_frames"] == 0 and stats["authorization_refusals"] == 0 for stats in fault["stats"]), fault
    for fault in certified:
        assert all(stats["unframed_answers"] == 0 for stats in fault["stats"]), fault
    refused: dict[str, int] = {}
    for stats in (stats for fault in certified for stats in fault["stats"]):
        refused[stats["attack"]] = refused.get(stats["attack"], 0) + stats["authorization_refusals"]
    assert refused["voter-impostor"] > 0 and refused["unknown-voter"] > 0, refused


@pytest.mark.long  # two minutes and more on 2 cores: make soak
async def test_storage_faults_on_real_processes_are_recorded_survived_and_lose_nothing(tmp_path):
    """Issue 14 part 5: kill -9 a voter and damage its stopped files (a
    flipped bit in a batch a valid batch follows, a torn last write, the
    election state taken away, one copy of it rolled back to an older one
    saved while the node ran), restart every voter at once, fill a voter's
    size-capped tmpfs. Each fault is in the history with its node, kind,
    file and byte offset, and did what docs/nemesis.md says it must: the
    damaged log repaired from a leader, the torn tail cut, the lost election
    state refused (and the kept file put back), the rolled-back copy
    noticed and the newer one taken, the full disk survived and
    resumed. The history is valid: nothing acknowledged was lost."""
    result = await run(tmp_path, None, scenario="storage", time_limit_s=60, seed=1, brokers=1, checker="reference")
    assert result.checker_error is None
    assert result.valid is True, result.anomalies
    history = history_of(result)
    nemesis = [e for e in history if e["process"] == "nemesis" and isinstance(e["value"], dict)]
    starts = [e for e in nemesis if e["value"].get("phase") == "start"]
    ends = {e["value"]["fault"].get("kind"): e for e in nemesis if e["value"].get("phase") == "end"}
    assert len(starts) == len([e for e in nemesis if e["value"].get("phase") == "end"])
    kinds = {e["value"]["fault"]["kind"] for e in starts}
    # This machine's tests run as root (tests/runtime/test_disk_full_process.py mounts too).
    assert {"flip-byte", "torn-write", "election-state-lost", "election-state-rollback", "restart-all-voters", "disk-full"} <= kinds, kinds
    for start in starts:
        fault = start["value"]["fault"]
        assert start["time"] > 0 and ("node" in fault or fault["nodes"] == [1, 2, 3]), fault
        if fault["kind"] != "restart-all-voters":
            assert fault["node"] in (1, 2, 3) and fault["file"] and isinstance(fault["offset"], int), fault
    outcomes = {kind: end["value"]["fault"] for kind, end in ends.items()}
    assert outcomes["flip-byte"]["outcome"] == "repaired", outcomes["flip-byte"]
    assert outcomes["torn-write"]["outcome"] == "torn tail cut", outcomes["torn-write"]
    lost = outcomes["election-state-lost"]
    assert lost["outcome"] == "refused" and "refuses to start" in lost["refusal"], lost
    rollback = outcomes["election-state-rollback"]
    assert rollback["outcome"] == "newer copy taken" and rollback["rolled_back_to"] < rollback["generation"], rollback
    assert outcomes["disk-full"]["outcome"] == "resumed", outcomes["disk-full"]
    assert outcomes["restart-all-voters"]["leader_after_s"] is not None
    for fault in outcomes.values():
        assert fault.get("back", True), fault
    # Writes went on around the faults, and the report draws them.
    assert result.ops["ok"] > 100
    report = result.report.read_text()
    assert "storage-flip-byte" in report and "hatch-disk" in report and "disk-full" in report


@pytest.mark.long  # half a minute on 2 cores: make soak (make run runs a chaos campaign with --tls; TLS bindings: tests/cli, tests/broker_agent)
async def test_a_chaos_campaign_over_mutual_tls_is_valid_and_nothing_is_refused(tmp_path):
    """Issue 16: every connection TLS (controllers, brokers, the harness's
    clients, synthetic brokers registering with their own certificates);
    the faults pass TLS through the proxy unchanged, the history is valid,
    and no request of the harness was refused by the ACL or the binding."""
    result = await run(tmp_path, None, scenario="chaos", time_limit_s=20, seed=4, checker="reference", tls=True)
    assert result.checker_error is None
    assert result.faults >= 2
    assert result.ops["ok"] > 100
    assert result.valid is True, result.anomalies
    history = (result.run_dir / "history.jsonl").read_text()
    assert "may not" not in history and "AUTHORIZATION" not in history
    registrations = [json.loads(line) for line in history.splitlines() if '"register_broker"' in line]
    assert any(event["type"] == "ok" for event in registrations), "synthetic brokers registered over TLS"
    logs = "".join(path.read_text() for path in (result.run_dir / "logs").glob("node*.log"))
    assert "mutual TLS 1.3 as pykraft://node/1" in logs and "PLAINTEXT" not in logs


@pytest.mark.long  # about two minutes on 2 cores (format, replacements, the reference checker): make soak
async def test_a_membership_campaign_changes_voters_under_faults_and_loses_nothing(tmp_path):
    """Issue 17 (KIP-853): four controllers formatted for dynamic voters
    (three voters, one observer), voters added, removed (the leader too)
    and replaced with a new disk between kills, pauses and isolations. The
    history records every change with the voter sets before and after, the
    report draws them, and the checker finds nothing."""
    result = await run(tmp_path, None, scenario="membership", time_limit_s=60, seed=5, controllers=4, brokers=0, checker="reference")
    assert result.checker_error is None
    assert result.valid is True, result.anomalies
    history = [json.loads(line) for line in (result.run_dir / "history.jsonl").read_text().splitlines()]
    changes = [event for event in history if event["f"] in ("add-voter", "remove-voter", "replace-voter")]
    ends = [event["value"]["fault"] for event in changes if event["value"]["phase"] == "end"]
    assert len(ends) >= 2 and all("voters_after" in end and "outcome" in end for end in ends)
    assert any(end["outcome"] == "ok" and end["voters_after"] != end["voters_before"] for end in ends)
    # The four controllers' log copies agree (the checker compared them).
    assert results_of(result)["stats"]["log_dump_records"] > 0
    report = result.report.read_text()
    assert "voter change: the node added, removed or given a new disk" in report


@pytest.mark.long  # about two minutes on 2 cores: make soak; the options' fast test is the next one
async def test_a_membership_campaign_with_brokers_and_auto_join_loses_nothing(tmp_path):
    """Issue 17: the membership nemesis with kraft-broker processes, which
    follow the voter set from the metadata log and keep serving metadata
    reads while voters change, and with auto-join on every controller: a
    replaced voter (a wiped disk, the old directory id removed by the
    operator step) rejoins by itself, recorded as
    ``replace-voter-auto-join``. Nothing lost or stale; the report draws
    the voter bands and names the auto-join replacements."""
    result = await run(
        tmp_path, None, scenario="membership", time_limit_s=60, seed=7, controllers=4, brokers=2, auto_join=True,
        checker="reference",
    )  # fmt: skip
    assert result.checker_error is None
    assert result.valid is True, result.anomalies
    history = [json.loads(line) for line in (result.run_dir / "history.jsonl").read_text().splitlines()]
    ends = [event for event in history if event["process"] == "nemesis" and event["value"].get("phase") == "end"]
    rejoined = [e for e in ends if e["f"] == "replace-voter-auto-join" and e["value"]["fault"].get("rejoined_by") == "auto-join"]
    assert rejoined, "no replaced voter rejoined by auto-join"
    fault = rejoined[0]["value"]["fault"]
    assert fault["removed"]["outcome"] == "ok" and fault["new_directory_id"] != fault["directory_id"]
    # The brokers served metadata reads, Online, after the last voter change.
    last_change = max(e["time"] for e in ends if e["f"] in ("add-voter", "remove-voter", "replace-voter", "replace-voter-auto-join"))
    assert any(
        e["type"] == "ok" and e.get("mode") == "broker" and e.get("state") == "Online" and e["time"] > last_change for e in history
    )
    report = result.report.read_text()
    assert "voter change: the node added, removed or given a new disk" in report and "replace-voter-auto-join" in report


def test_a_membership_campaign_takes_brokers_and_auto_join_other_scenarios_refuse_it(tmp_path):
    """kraft-broker follows the voter set (broker_agent, issue 17 item 4),
    so the membership scenario runs with brokers; ``--auto-join`` puts
    ``--auto-join`` on every controller and needs dynamic voters."""
    campaign = Campaign(CampaignOptions(store=tmp_path / "store", scenario="membership", brokers=2, auto_join=True))
    assert campaign.settings.dynamic_voters and campaign.settings.auto_join
    with pytest.raises(ValueError, match="--auto-join needs dynamic voters"):
        Campaign(CampaignOptions(store=tmp_path / "store", scenario="chaos", auto_join=True))
