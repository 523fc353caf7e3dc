"""The state machine interface the runtime drives (``quorum.StateMachine``)
and the key-value machine (``quorum.KeyValueStateMachine``), under their
runtime names. Both live in ``quorum`` so that the simulator and the
controller's state machine reach them without the trio runtime."""

from .._host import StateMachine
from .._state_machine import KeyValueStateMachine

__all__ = ["KeyValueStateMachine", "StateMachine"]
