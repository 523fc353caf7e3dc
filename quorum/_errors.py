"""The errors the quorum core raises, and whose fault each one is.

In the manner of h11's ``LocalProtocolError`` / ``RemoteProtocolError``, an
error says who must act:

- ``NotLeaderError``: the caller asked a non-leader to do a leader's work.
  Nothing is wrong; retry at the leader it names, if any.
- ``ReconfigurationError``: a voter change the leader refuses (one at a
  time, only once the leader has committed in its own epoch, only a
  caught-up new voter). Nothing changed; retry later or fix the request.
- ``QuorumInvariantError``: a safety rule would be broken (an epoch going
  back, two leaders in one epoch, a truncation below the high watermark).
  It is the only "bug in us" error: either this node or a peer does not
  follow the protocol. Never caught inside the core; the node must stop
  rather than go on with a view it can no longer trust.

Misuse of the API by the driver (a message delivered to the wrong node, a
snapshot of uncommitted records) raises ``ValueError`` or ``TypeError`` as
any Python API would. A peer's malformed message never reaches the core:
``quorum/wire`` refuses it at the edge.

These names are public (``from quorum import QuorumError``) and stable.
"""

from __future__ import annotations

from ._messages import ErrorCode


class QuorumError(Exception):
    """Base class of the errors the core raises."""


class NotLeaderError(QuorumError):
    """A local action needs the leader, and this node is not it (caller's
    fault, retriable elsewhere). ``leader_id`` is a hint, possibly None."""

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader hint {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ReconfigurationError(QuorumError):
    """The leader refuses a voter change (KIP-853): the caller's request
    cannot be done now (another change is not yet committed, the leader has
    not yet committed a record of its own epoch, the new voter is not caught
    up) or at all (a static voter set, an unknown voter, the last voter).
    Nothing changed; ``reason`` says which, and ``code`` classes it as the
    answer to an AddVoter or RemoveVoter request does: VOTER_CHANGE_IN_PROGRESS
    (retry shortly), VOTER_NOT_CAUGHT_UP, DUPLICATE_VOTER, VOTER_NOT_FOUND,
    VOTER_REMOVED (auto-join asked for a disk an operator removed) or
    INVALID_REQUEST (a static voter set, the last voter)."""

    def __init__(self, reason: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class QuorumInvariantError(QuorumError):
    """A safety invariant would be broken. Never caught inside the core: the
    node must stop rather than continue with a corrupt view."""


def leaf_exceptions(error: BaseException) -> list[BaseException]:
    """The exceptions inside ``error``'s (nested) exception groups, in
    order; ``[error]`` when it is not a group."""
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    return [leaf for inner in error.exceptions for leaf in leaf_exceptions(inner)]
