"""docs/operations.md cannot drift from the code: every configuration field
and every exported metric is documented there."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker_agent import BrokerConfig
from broker_agent._lifecycle import LifecycleConfig
from quorum import QuorumConfig
from quorum.runtime import Metrics, NodeConfig
from registration import ControllerConfig

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"


def section(markdown: str, heading_start: str) -> str:
    """The text of the ``###`` section whose heading starts with ``heading_start``."""
    match = re.search(rf"^### {re.escape(heading_start)}.*?$(.*?)(?=^##)", markdown, re.M | re.S)
    assert match, f"operations.md has no section '### {heading_start}...'"
    return match.group(1)


@pytest.mark.parametrize("config_class", [QuorumConfig, NodeConfig, ControllerConfig, BrokerConfig, LifecycleConfig])
def test_every_config_field_is_documented_in_its_section(config_class):
    text = section(OPERATIONS.read_text(), config_class.__name__)
    names = [field.name for field in dataclasses.fields(config_class) if field.init]
    assert names, config_class
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"{config_class.__name__} fields missing from operations.md: {missing}"


def exported_metric_names() -> set[str]:
    """Every metric name the runtime, the controller and the broker export:
    the names in their source, and what a populated ``Metrics`` renders."""
    names: set[str] = set()
    for package in ("quorum", "registration", "broker_agent"):
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"\bpykraft_(?:quorum|controller|broker|metrics|event_loop)_[a-z_]*[a-z]", path.read_text()))
    names |= {name for name in re.findall(r"^# TYPE (\S+) ", Metrics(1).text(), re.M) if name.startswith("pykraft_")}
    return names


def test_every_exported_metric_is_documented():
    names = exported_metric_names()
    assert {"pykraft_quorum_role", "pykraft_controller_brokers", "pykraft_broker_state"} <= names
    text = OPERATIONS.read_text()
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing, f"metrics missing from operations.md's table: {missing}"
