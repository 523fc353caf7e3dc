"""Per-key linearizability: the Wing–Gong search with Lowe's memoisation.

The history of one object becomes a list of call and return entries in time
order (calls before returns at equal times: closed intervals, so equal times
are concurrent). The search walks the list from its head. At a call it tries
to linearize that operation now: if the model accepts it and the pair
(linearized set, new state) has not been seen before, it records the choice
on a stack, lifts the call and its return out of the list and starts again
from the head. Reaching a return means the operation it closes was not
linearized before it returned: undo the last choice and try the next call.
All ``ok`` operations linearized means linearizable; an empty stack at a
return means not. The (bitset, state) cache is what keeps the search roughly
linear in length for bounded concurrency (Lowe, "Testing for
linearizability"; Horn & Kroening, arXiv 1504.00204; Porcupine's checker.go).

``info`` operations have a call entry and no return entry: they may be
linearized anywhere after their invoke, or never. ``fail`` operations and
reads that did not return ``ok`` are dropped: they cannot influence state.

Each key has a budget, shared by its search and the shrinking of its
witness; out of budget the verdict is ``unknown``, never a guess, with the
reason (which limit, how much was explored). Two limits are counts, so the
verdict and the witness are the same on any machine under any load (a
CPU-time budget made a witness minimal on a quiet machine and not under
load): search steps (one step: one visit of an entry in the list) and
explored states (entries of the memo cache: distinct pairs of linearized
set and model state, which is also what the key costs in memory). The
third, milliseconds of wall-clock time per key, is a safety net for keys
whose steps are slow; and the whole check's deadline, if it has one, stops
a key's search too (both looked at every few thousand steps).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from jepsen_like.checker._models import (
    OK,
    Model,
    Operation,
    dropped_by_search,
    render_operation,
)

LINEARIZABLE = "linearizable"
NOT_LINEARIZABLE = "not-linearizable"
UNKNOWN = "unknown"

# The default per-key budgets. Steps: about 30 s of one core of this
# project's 2-core test machine (roughly 1.5 million steps a second under
# load). States: the memo cache costs ~200 bytes an entry, so a key stays
# under a gigabyte of the executor's memory. Milliseconds: well past what the
# other two allow on any machine, the net for a model whose steps are slow.
DEFAULT_BUDGET_STEPS = 50_000_000
DEFAULT_BUDGET_STATES = 4_000_000
DEFAULT_BUDGET_MS = 600_000
# How often (in search steps) the clocks are looked at: about a millisecond.
_CLOCK_CHECK_EVERY_STEPS = 2048

# Which limit left a key unknown (``KeyVerdict.budget``).
BUDGET_STEPS = "steps"
BUDGET_STATES = "states"
BUDGET_TIME = "time"
BUDGET_DEADLINE = "deadline"


@dataclass(frozen=True, slots=True)
class KeyVerdict:
    """The linearizability verdict for one key.

    ``witness`` is set for ``not-linearizable`` (see :func:`check_operations`);
    ``reason`` says why a verdict is ``unknown``.
    """

    verdict: str
    ops: int
    steps: int
    seconds: float  # CPU seconds spent, for reports only: nothing decides on it
    witness: dict[str, Any] | None = None
    reason: str | None = None
    states: int = 0  # memo cache entries made, over every search of the key
    budget: str | None = None  # for unknown: the limit that ran out (BUDGET_*)


@dataclass(frozen=True, slots=True)
class KeyBudget:
    """What one key's search may spend (see the module docstring), and the
    whole check's deadline as a wall-clock time (``time.time()``; None: no
    deadline). Picklable: it travels to Spark's executors, whose clocks are
    assumed to agree with the driver's to well under a second (NTP)."""

    budget_steps: int = DEFAULT_BUDGET_STEPS
    budget_states: int = DEFAULT_BUDGET_STATES
    budget_ms: int = DEFAULT_BUDGET_MS
    deadline_at_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("budget_steps", "budget_states", "budget_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be positive, got {value!r} (a whole number)")

    def deadline_passed(self) -> bool:
        return self.deadline_at_s is not None and time.time() >= self.deadline_at_s


def deadline_reason(what: str = "this key was searched") -> str:
    """The reason given for what the check's deadline left undecided."""
    return f"deadline: the check's deadline passed before {what}"


class OutOfBudget(Exception):
    def __init__(self, budget: str, reason: str) -> None:
        super().__init__(reason)
        self.budget = budget


class BudgetMeter:
    """What every search run for one key has spent, against its
    :class:`KeyBudget`, and the deepest point a search reached (a fallback
    witness)."""

    def __init__(self, limits: KeyBudget) -> None:
        self.limits = limits
        self.budget_steps = limits.budget_steps
        self.budget_states = limits.budget_states
        self.steps = 0
        self.states = 0
        self.deepest_depth = -1
        self.deepest_blocked_index: int | None = None
        self._start_s = time.thread_time()
        now_s = time.monotonic()
        # Both clocks as one monotonic instant: the key's own time budget,
        # or the check's deadline if that comes first.
        self.stop_at_s = now_s + limits.budget_ms / 1000
        self.stop_budget = BUDGET_TIME
        if limits.deadline_at_s is not None:
            deadline_s = now_s + (limits.deadline_at_s - time.time())
            if deadline_s <= self.stop_at_s:
                self.stop_at_s, self.stop_budget = deadline_s, BUDGET_DEADLINE

    def elapsed_s(self) -> float:
        return time.thread_time() - self._start_s

    def _explored(self) -> str:
        return f"after {self.steps} steps and {self.states} explored states"

    def out_of_steps(self) -> OutOfBudget:
        return OutOfBudget(BUDGET_STEPS, f"search budget of {self.budget_steps} steps used up ({self.states} explored states)")

    def out_of_states(self) -> OutOfBudget:
        return OutOfBudget(BUDGET_STATES, f"state budget of {self.budget_states} explored states used up ({self.steps} steps)")

    def charge_step(self) -> None:
        """One step of a search that keeps no count of its own (the
        reference checker's). Raises :class:`OutOfBudget` past a limit."""
        self.steps += 1
        if self.steps > self.budget_steps:
            self.steps = self.budget_steps
            raise self.out_of_steps()
        if self.steps % _CLOCK_CHECK_EVERY_STEPS == 0 and self.clock_passed():
            raise self.out_of_time()

    def charge_state(self) -> None:
        """One explored state, as :meth:`charge_step`."""
        if self.states >= self.budget_states:
            raise self.out_of_states()
        self.states += 1

    def clock_passed(self) -> bool:
        """Whether the key's time budget or the check's deadline has passed."""
        return time.monotonic() >= self.stop_at_s

    def out_of_time(self) -> OutOfBudget:
        if self.stop_budget == BUDGET_DEADLINE:
            return OutOfBudget(BUDGET_DEADLINE, f"deadline: the check's deadline passed {self._explored()}")
        return OutOfBudget(BUDGET_TIME, f"time budget of {self.limits.budget_ms} ms used up {self._explored()}")


@dataclass(frozen=True, slots=True)
class _Call:
    """What the search needs of one operation."""

    call_ns: int
    return_ns: int | None  # None: may stay pending forever (info)
    index: int
    prepared: tuple


def _search(calls: Sequence[_Call], model: Model, budget: BudgetMeter) -> list[int] | None:
    """Linearize ``calls``; return a linearization (positions in ``calls``,
    in order) or ``None`` when there is none.

    Raises :class:`OutOfBudget` when the budget runs out first.
    """
    entries: list[tuple[int, int, int, int]] = []  # (time, 0 call / 1 return, index, position)
    for position, call in enumerate(calls):
        entries.append((call.call_ns, 0, call.index, position))
        if call.return_ns is not None:
            entries.append((call.return_ns, 1, call.index, position))
    entries.sort()

    entry_count = len(entries)
    head = entry_count  # sentinel: next_entry[head] is the first entry left
    next_entry = list(range(1, entry_count + 1)) + [0]
    prev_entry = [head] + list(range(0, entry_count - 1)) + [-1]
    if entry_count:
        next_entry[entry_count - 1] = -1
    else:
        next_entry[head] = -1
    is_call = [kind == 0 for _, kind, _, _ in entries]
    position_of = [position for _, _, _, position in entries]
    return_entry_of_call = [-1] * entry_count
    call_entry_of_position = [-1] * len(calls)
    for entry, (_, kind, _, position) in enumerate(entries):
        if kind == 0:
            call_entry_of_position[position] = entry
    for entry, (_, kind, _, position) in enumerate(entries):
        if kind == 1:
            return_entry_of_call[call_entry_of_position[position]] = entry

    prepared = [call.prepared for call in calls]
    step = model.step
    state: Hashable = model.initial_state
    linearized = 0
    remaining = sum(1 for call in calls if call.return_ns is not None)
    cache: set[tuple[int, Hashable]] = set()
    stack: list[tuple[int, Hashable]] = []  # (call entry, state before it)

    def lift(entry: int) -> None:
        before, after = prev_entry[entry], next_entry[entry]
        next_entry[before] = after
        if after != -1:
            prev_entry[after] = before
        match = return_entry_of_call[entry]
        if match != -1:
            before, after = prev_entry[match], next_entry[match]
            next_entry[before] = after
            if after != -1:
                prev_entry[after] = before

    def unlift(entry: int) -> None:
        # Dancing links: re-insert in the reverse order of removal.
        match = return_entry_of_call[entry]
        if match != -1:
            next_entry[prev_entry[match]] = match
            if next_entry[match] != -1:
                prev_entry[next_entry[match]] = match
        next_entry[prev_entry[entry]] = entry
        if next_entry[entry] != -1:
            prev_entry[next_entry[entry]] = entry

    entry = next_entry[head]
    steps = 0
    steps_max = budget.budget_steps - budget.steps
    states_max = budget.budget_states - budget.states

    def spent(step_count: int) -> None:
        budget.steps += step_count
        budget.states += len(cache)

    while remaining:
        steps += 1
        if steps > steps_max:
            spent(steps_max)
            raise budget.out_of_steps()
        if steps % _CLOCK_CHECK_EVERY_STEPS == 0 and budget.clock_passed():
            spent(steps)
            raise budget.out_of_time()
        if entry != -1 and is_call[entry]:
            position = position_of[entry]
            legal, new_state = step(state, prepared[position])
            if legal:
                new_linearized = linearized | (1 << position)
                memo_key = (new_linearized, new_state)
                if memo_key not in cache:
                    if len(cache) >= states_max:
                        spent(steps)
                        raise budget.out_of_states()
                    cache.add(memo_key)
                    stack.append((entry, state))
                    state = new_state
                    linearized = new_linearized
                    if return_entry_of_call[entry] != -1:
                        remaining -= 1
                    lift(entry)
                    entry = next_entry[head]
                    continue
            entry = next_entry[entry]
        else:
            # A return (or, defensively, the end of the list) before its call
            # was linearized: undo the most recent choice and try the next call.
            if entry != -1 and len(stack) > budget.deepest_depth:
                budget.deepest_depth = len(stack)
                budget.deepest_blocked_index = calls[position_of[entry]].index
            if not stack:
                spent(steps)
                return None
            entry, state = stack.pop()
            linearized &= ~(1 << position_of[entry])
            if return_entry_of_call[entry] != -1:
                remaining += 1
            unlift(entry)
            entry = next_entry[entry]
    spent(steps)
    return [position_of[call_entry] for call_entry, _ in stack]


def _prefix(calls: Sequence[_Call], returns: Sequence[_Call], count: int) -> list[_Call]:
    """The history up to and including the ``count``-th return (in entry
    order): operations invoked by then, those not yet returned made pending."""
    if count == 0:
        return []
    cut = returns[count - 1]
    cut_key = (cut.return_ns, cut.index)
    prefix = []
    for call in calls:
        if call.call_ns > cut.return_ns:
            continue
        if call.return_ns is not None and (call.return_ns, call.index) > cut_key:
            call = _Call(call.call_ns, None, call.index, call.prepared)
        prefix.append(call)
    return prefix


def check_operations(
    operations: Sequence[Operation],
    model: Model,
    *,
    budget_steps: int = DEFAULT_BUDGET_STEPS,
    budget_states: int = DEFAULT_BUDGET_STATES,
    budget_ms: int = DEFAULT_BUDGET_MS,
    deadline_at_s: float | None = None,
) -> KeyVerdict:
    """Decide whether the operations on one key are linearizable.

    ``operations`` are all the key's operations the search should consider
    (see :func:`jepsen_like.checker._models.is_tier2_candidate`); failed
    operations and non-``ok`` reads among them are dropped here.

    For ``not-linearizable`` the witness is minimal in this sense: its ``op``
    is the operation whose completion ends the shortest prefix of the key's
    history that is already not linearizable (operations still open at that
    point count as pending). ``linearized`` is one linearization of the
    history just before that completion, with the state after each step;
    ``concurrent`` lists the other operations open or unlinearized at that
    point, which were the candidates to explain ``op``. If the budget runs out
    while shrinking, the witness is the deepest point the full search reached
    and ``minimal`` is false.

    The budget (see :class:`KeyBudget`) bounds the search and the shrinking
    together: ``budget_steps`` search steps, ``budget_states`` explored
    states, ``budget_ms`` milliseconds, and the check's ``deadline_at_s``
    (a ``time.time()`` instant; a key begun after it is not searched). The
    same operations and step and state budgets give the same verdict and
    witness on any machine; out of budget the verdict is ``unknown``, with
    ``budget`` naming the limit and ``reason`` saying what was explored.

    Raises :class:`HistoryFormatError` when an operation's value does not fit
    the model, and ``ValueError`` when a budget is not a positive integer.
    """
    limits = KeyBudget(budget_steps, budget_states, budget_ms, deadline_at_s)
    return check_key(operations, model, limits)


def check_key(operations: Sequence[Operation], model: Model, limits: KeyBudget) -> KeyVerdict:
    """:func:`check_operations` with its budget as one :class:`KeyBudget`."""
    budget = BudgetMeter(limits)
    relevant = [op for op in operations if not dropped_by_search(op, model)]
    relevant.sort(key=lambda op: (op.call_ns, op.index))
    if limits.deadline_passed():
        return KeyVerdict(UNKNOWN, len(relevant), 0, 0.0, reason=deadline_reason(), budget=BUDGET_DEADLINE)
    if model.key_check is not None:
        return _key_check(relevant, model, budget)
    by_index = {op.index: op for op in relevant}
    calls = [
        _Call(op.call_ns, op.return_ns if op.outcome == OK else None, op.index, model.prepare(op))
        for op in relevant
    ]

    def verdict(name: str, **extra: Any) -> KeyVerdict:
        return KeyVerdict(name, len(relevant), budget.steps, budget.elapsed_s(), states=budget.states, **extra)

    try:
        order = _search(calls, model, budget)
    except OutOfBudget as exhausted:
        return verdict(UNKNOWN, reason=str(exhausted), budget=exhausted.budget)
    if order is not None:
        return verdict(LINEARIZABLE)
    deepest_blocked_index = budget.deepest_blocked_index
    try:
        witness = _minimal_witness(calls, by_index, model, budget)
    except OutOfBudget as exhausted:
        # The full search already refuted the key; only the shrinking ran out.
        witness = {
            "op": render_operation(by_index[deepest_blocked_index]),
            "minimal": False,
            "reason": f"{exhausted} while shrinking; op is where the deepest search attempt was blocked",
        }
    return verdict(NOT_LINEARIZABLE, witness=witness)


def _key_check(relevant: Sequence[Operation], model: Model, budget: BudgetMeter) -> KeyVerdict:
    """A model's own per-key check (the counter's bounds), in place of the
    search; one step per operation."""
    for op in relevant:
        model.prepare(op)  # the values must fit the model, as for the search
    budget.steps = len(relevant)
    found = model.key_check(relevant, model)  # type: ignore[misc]
    if found is None:
        return KeyVerdict(LINEARIZABLE, len(relevant), budget.steps, budget.elapsed_s())
    return KeyVerdict(NOT_LINEARIZABLE, len(relevant), budget.steps, budget.elapsed_s(), witness=found[1])


def _minimal_witness(
    calls: Sequence[_Call], by_index: dict[int, Operation], model: Model, budget: BudgetMeter
) -> dict[str, Any]:
    returns = sorted((call for call in calls if call.return_ns is not None), key=lambda c: (c.return_ns, c.index))
    # Not linearizable is monotone in the prefix (a linearization of a longer
    # prefix, cut after its last operation that returned within the shorter
    # one, linearizes the shorter one), so bisect for the shortest.
    low, high = 1, len(returns)  # prefix `high` is known not linearizable
    while low < high:
        middle = (low + high) // 2
        if _search(_prefix(calls, returns, middle), model, budget) is None:
            high = middle
        else:
            low = middle + 1
    failing = returns[high - 1]
    before = _prefix(calls, returns, high - 1)
    order = _search(before, model, budget) or []
    state = model.initial_state
    linearized = []
    for position in order:
        call = before[position]
        _, state = model.step(state, call.prepared)
        linearized.append({"index": call.index, "state": model.value_of_state(state)})
    linearized_indexes = {step["index"] for step in linearized}
    concurrent = [
        render_operation(by_index[call.index])
        for call in _prefix(calls, returns, high)
        if call.index not in linearized_indexes and call.index != failing.index
    ]
    return {
        "op": render_operation(by_index[failing.index]),
        "minimal": True,
        "state": model.value_of_state(state),
        "linearized": linearized,
        "concurrent": concurrent,
    }
