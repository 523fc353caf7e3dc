"""The alerting rules in docs/prometheus/ are valid (`promtool check
rules`) and do what their unit tests say (`promtool test rules`)."""

from __future__ import annotations

from prometheus_tools import require_prometheus

from jepsen_like.prometheus import ALERT_RULES, ALERT_TESTS, promtool

REQUIRED_ALERTS = {
    "PykraftNoLeader",
    "PykraftFrequentLeaderChanges",
    "PykraftCommitLatencyHigh",
    "PykraftFsyncLatencyHigh",
    "PykraftApplyLagHigh",
    "PykraftApplyLagTimeHigh",
    "PykraftFencedBrokers",
    "PykraftDiskFailing",
    "PykraftCertificateExpiringSoon",
    "PykraftCertificateExpiryCritical",
}


def test_the_alert_rules_check():
    require_prometheus()
    checked = promtool("check", "rules", str(ALERT_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(REQUIRED_ALERTS)} rules found" in checked.stdout


def test_the_alert_rules_pass_their_unit_tests():
    require_prometheus()
    tested = promtool("test", "rules", str(ALERT_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    # Every required alert has a case that expects it to fire.
    text = ALERT_TESTS.read_text()
    for alert in REQUIRED_ALERTS:
        assert f"alertname: {alert}\n        exp_alerts:\n          - exp_labels" in text, alert


def test_a_broken_rule_is_refused_by_the_check(tmp_path):
    require_prometheus()
    broken = tmp_path / "broken.yml"
    broken.write_text(ALERT_RULES.read_text().replace("> 0.25", "> > 0.25"))
    checked = promtool("check", "rules", str(broken))
    assert checked.returncode != 0
