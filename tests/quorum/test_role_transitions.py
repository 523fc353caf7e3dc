"""The role-transition table (``quorum/_roles.py``): the core refuses any
role change it does not list, and docs/raft.md embeds exactly the diagram
``python -m quorum.diagram`` draws from it."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from quorum import ElectionState, QuorumConfig, QuorumInvariantError, QuorumNode, Role
from quorum._roles import ROLE_TRANSITIONS, Trigger, transition_allowed
from quorum.diagram import BEGIN_MARKER, END_MARKER, render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "raft.md"


def node(election_state: ElectionState | None = None, node_id: int = 1) -> QuorumNode:
    config = QuorumConfig(node_id=node_id, voters=(1, 2, 3))
    return QuorumNode(config, rng=random.Random(0), election_state=election_state)


def test_docs_embed_the_generated_roles_section_verbatim():
    text = DOCS.read_text()
    assert text.count(BEGIN_MARKER) == 1
    start = text.index(BEGIN_MARKER)
    end = text.index(END_MARKER, start) + len(END_MARKER)
    assert text[start:end] == render(), "regenerate with: python -m quorum.diagram"


def test_the_diagram_module_prints_the_section():
    printed = subprocess.run(
        [sys.executable, "-m", "quorum.diagram"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert printed == render() + "\n"


def test_every_role_is_entered_and_left_and_every_row_is_drawn():
    targets = {row.target for row in ROLE_TRANSITIONS}
    sources = {row.source for row in ROLE_TRANSITIONS if row.source is not None}
    assert targets == sources == set(Role)
    mermaid = render()
    for row in ROLE_TRANSITIONS:
        assert row.trigger.value in mermaid and row.rule in mermaid


def test_startup_goes_through_the_table():
    assert node().role is Role.UNATTACHED
    assert node(ElectionState(epoch=3, leader_id=2)).role is Role.FOLLOWER
    assert node(ElectionState(epoch=3, voted_for=1, leader_id=1)).role is Role.RESIGNED
    assert not transition_allowed(None, Role.LEADER, Trigger.START)


def test_a_follower_cannot_become_leader_without_an_election():
    follower = node(ElectionState(epoch=3, leader_id=2))
    with pytest.raises(QuorumInvariantError, match="Follower -> Leader on 'won the election'"):
        follower._become_leader()  # what a bug in a vote path would do
    assert follower.role is Role.FOLLOWER


def test_a_later_epoch_must_be_later():
    unattached = node(ElectionState(epoch=3))
    with pytest.raises(QuorumInvariantError, match="a later epoch was claimed"):
        unattached._become_unattached(3, reason="a bug")  # the default trigger: a later epoch
    unattached._become_unattached(4, reason="vote request from 2 in a later epoch")
    assert (unattached.role, unattached.epoch) == (Role.UNATTACHED, 4)


def test_a_leader_resigns_only_on_check_quorum_or_request():
    assert {row.trigger for row in ROLE_TRANSITIONS if row.source is Role.LEADER and row.target is Role.RESIGNED} == {
        Trigger.CHECK_QUORUM,
        Trigger.RESIGN_REQUESTED,
    }
    assert not transition_allowed(Role.FOLLOWER, Role.RESIGNED, Trigger.CHECK_QUORUM)
