"""Messages, and the core's records of a Fetch (parked, in flight), are
never changed once built. They are not ``frozen=True`` dataclasses, whose
per-field ``object.__setattr__`` made them dear to build on every write
(quorum/_messages.py), so this holds by convention; these tests hold the
core and the simulator to it: every such class refuses a second assignment
to a field while whole simulated histories (elections, faults, restarts) run."""

from __future__ import annotations

import dataclasses

import pytest

from jepsen_like.sim import run_scenario
from quorum import MESSAGE_TYPES
from quorum._role_state import FetchInFlight, ParkedFetch

NEVER_CHANGED = (*MESSAGE_TYPES, ParkedFetch, FetchInFlight)


def _set_once(self: object, name: str, value: object) -> None:
    # A slot not yet set raises AttributeError when read: the constructor's
    # own assignment. Any later one is a change.
    try:
        getattr(self, name)
    except AttributeError:
        object.__setattr__(self, name, value)
        return
    raise AssertionError(f"{type(self).__name__}.{name} assigned after construction")


@pytest.fixture
def fields_set_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for kind in NEVER_CHANGED:
        monkeypatch.setattr(kind, "__setattr__", _set_once)


def test_the_guard_catches_a_change(fields_set_once: None) -> None:
    # The guard itself: construction passes, an assignment afterwards fails.
    in_flight = FetchInFlight(request_id=1, target=2, deadline_tick=3)
    with pytest.raises(AssertionError, match="FetchInFlight.target assigned after construction"):
        in_flight.target = 3
    assert in_flight == FetchInFlight(1, 2, 3)


@pytest.mark.parametrize(
    ("scenario", "seed"),
    [("random", 1), ("fast-bounce", 1)],
)
def test_no_message_is_changed_in_a_simulated_history(fields_set_once: None, scenario: str, seed: int) -> None:
    run = run_scenario(scenario, seed)
    # A field assigned twice would be reported as a crash of the run.
    assert run.valid, run.violation
    assert run.simulation.history, "the scenario ran no operation"


def test_messages_hash_and_compare_by_value() -> None:
    # As frozen dataclasses did: equal fields, equal messages and hashes.
    for kind in MESSAGE_TYPES:
        values = {field.name: 1 for field in dataclasses.fields(kind)}
        if "preferred_successors" in values:
            values["preferred_successors"] = (1,)
        first, second = kind(**values), kind(**values)
        assert first == second and hash(first) == hash(second)
