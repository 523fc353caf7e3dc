"""One error vocabulary (issue 13, part 7): see docs/embedding.md#errors."""

from __future__ import annotations

import importlib

import pytest

import broker_agent
import jepsen_like
import registration
from quorum import QuorumError, QuorumInvariantError

QUORUM_MODULES = ("quorum", "quorum.runtime", "quorum.storage", "quorum.wire", "quorum.client")


def exported_errors(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [name for name in vars(module) if not name.startswith("_")]
    values = [getattr(module, name) for name in names]
    return [value for value in values if isinstance(value, type) and issubclass(value, BaseException)]


@pytest.mark.parametrize("module_name", QUORUM_MODULES)
def test_every_error_the_quorum_exports_is_a_quorum_error(module_name):
    errors = exported_errors(module_name)
    assert errors, f"{module_name} exports no error class: the test would prove nothing"
    outside = [error.__qualname__ for error in errors if not issubclass(error, QuorumError)]
    assert outside == [], f"{module_name} exports errors outside QuorumError: {outside}"


def test_each_package_has_one_bug_in_us_error():
    assert issubclass(QuorumInvariantError, QuorumError)
    assert issubclass(registration.InvalidTransitionError, registration.RegistrationInvariantError)
    # The broker agent's lifecycle table shares the controller's error.
    assert broker_agent.InvalidTransitionError is registration.InvalidTransitionError
    assert issubclass(jepsen_like.HarnessInvariantError, AssertionError)


def test_both_lifecycle_tables_raise_the_one_invalid_transition_error():
    with pytest.raises(registration.InvalidTransitionError, match="no transition from Offline"):
        registration.next_state(registration.BrokerState.OFFLINE, registration.BrokerEvent.UNFENCE)
    with pytest.raises(registration.InvalidTransitionError, match="no transition from Offline"):
        broker_agent.next_state(registration.BrokerState.OFFLINE, broker_agent.LifecycleEvent.SESSION_LOST)
