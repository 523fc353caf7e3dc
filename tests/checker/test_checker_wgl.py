"""The linearizability search (WGL with memoisation), in pure Python: unit
cases, the budget, the minimal witness, and agreement with the naive
reference search on generated histories."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jepsen_like.checker import KV, REGISTER, Operation, check_operations
from jepsen_like.checker._reference import first_unlinearizable_naive, linearizable_naive


def op(index: int, f: str, value: Any = None, *, start: int, end: int | None, outcome: str = "ok", key: str = "x",
       result: Any = None) -> Operation:
    """An operation; writes return their value, reads ``result``."""
    return Operation(
        index=index, process=index, f=f, key=key, outcome=outcome, invoke_value=value,
        value=result if f in ("read", "get") else value,
        call_ns=start, return_ns=end if outcome in ("ok", "fail") else None,
        complete_index=index + 1000 if end is not None else None, complete_ns=end,
    )


def verdict(operations, model=REGISTER) -> str:
    return check_operations(operations, model).verdict


def test_sequential_register_is_linearizable():
    history = [op(0, "write", 1, start=0, end=1), op(1, "read", start=2, end=3, result=1),
               op(2, "cas", [1, 2], start=4, end=5), op(3, "read", start=6, end=7, result=2)]
    assert verdict(history) == "linearizable"


def test_read_missing_a_completed_write_is_not_linearizable():
    history = [op(0, "write", 1, start=0, end=1), op(1, "write", 2, start=2, end=3), op(2, "read", start=4, end=5, result=1)]
    assert verdict(history) == "not-linearizable"


def test_concurrent_operations_may_take_effect_in_either_order():
    history = [op(0, "write", 1, start=0, end=10), op(1, "read", start=1, end=2, result=1),
               op(2, "write", 2, start=0, end=10), op(3, "read", start=3, end=4, result=2)]
    assert verdict(history) == "linearizable"
    # ...but not back again: 1, 2, then 1 needs a third write of 1.
    assert verdict(history + [op(4, "read", start=5, end=6, result=1)]) == "not-linearizable"


def test_equal_times_are_concurrent():
    # The read is invoked at the instant the write returns: it may precede it.
    history = [op(0, "write", 1, start=0, end=5), op(1, "read", start=5, end=6, result=None)]
    assert verdict(history) == "linearizable"
    later = [op(0, "write", 1, start=0, end=5), op(1, "read", start=6, end=7, result=None)]
    assert verdict(later) == "not-linearizable"


def test_info_write_may_happen_late_or_never():
    late = [op(0, "write", 1, start=0, end=None, outcome="info"), op(1, "write", 2, start=1, end=2),
            op(2, "read", start=3, end=4, result=2), op(3, "read", start=5, end=6, result=1)]
    assert verdict(late) == "linearizable"  # the info write took effect after the first read
    never = [op(0, "write", 1, start=0, end=None, outcome="info"), op(1, "read", start=3, end=4, result=None)]
    assert verdict(never) == "linearizable"
    # It cannot take effect before its invoke.
    early = [op(0, "read", start=0, end=1, result=1), op(1, "write", 1, start=2, end=None, outcome="info")]
    assert verdict(early) == "not-linearizable"


def test_failed_operations_did_not_happen():
    history = [op(0, "write", 1, start=0, end=1, outcome="fail"), op(1, "read", start=2, end=3, result=1)]
    assert verdict(history) == "not-linearizable"
    cas = [op(0, "write", 1, start=0, end=1), op(1, "cas", [1, 2], start=2, end=3, outcome="fail"),
           op(2, "read", start=4, end=5, result=1)]
    assert verdict(cas) == "linearizable"


def test_cas_takes_effect_only_on_its_expected_value():
    ok_on_wrong_value = [op(0, "write", 1, start=0, end=1), op(1, "cas", [3, 2], start=2, end=3)]
    assert verdict(ok_on_wrong_value) == "not-linearizable"
    info_cas = [op(0, "write", 1, start=0, end=1), op(1, "cas", [1, 2], start=2, end=None, outcome="info"),
                op(2, "read", start=4, end=5, result=2)]
    assert verdict(info_cas) == "linearizable"


def test_kv_model_appends_concatenate_from_empty():
    history = [op(0, "append", "a", start=0, end=1), op(1, "append", "b", start=2, end=3),
               op(2, "get", start=4, end=5, result="ab"), op(3, "put", "z", start=6, end=7),
               op(4, "get", start=8, end=9, result="z")]
    assert verdict(history, KV) == "linearizable"
    assert verdict([op(0, "get", start=0, end=1, result="")], KV) == "linearizable"
    wrong_order = [op(0, "append", "a", start=0, end=1), op(1, "append", "b", start=2, end=3),
                   op(2, "get", start=4, end=5, result="ba")]
    assert verdict(wrong_order, KV) == "not-linearizable"


def test_out_of_budget_is_unknown_never_a_guess():
    # Twelve appends that may each happen in any order (or never), then an
    # impossible read: refuting it means trying every order.
    appends = [op(i, "append", chr(ord("a") + i), start=0, end=None, outcome="info") for i in range(12)]
    impossible = op(99, "get", start=1, end=2, result="zzz")
    result = check_operations(appends + [impossible], KV, budget_steps=5000)
    assert result.verdict == "unknown"
    assert result.reason == f"search budget of 5000 steps used up ({result.states} explored states)"
    assert (result.budget, result.steps) == ("steps", 5000)
    assert 0 < result.states < 5000
    assert result.witness is None


def _stale_read_history() -> list[Operation]:
    """Six concurrent writers, then a read of a value already overwritten by
    a write that completed before the read began, then more traffic: a
    refutation that takes some searching and some shrinking."""
    writers = [op(i, "write", i, start=0, end=10 + i) for i in range(6)]
    overwrite = op(6, "write", 9, start=20, end=21)
    stale = op(7, "read", start=22, end=23, result=3)
    later = [op(8 + i, "write", 20 + i, start=24 + 2 * i, end=25 + 2 * i) for i in range(4)]
    return writers + [overwrite, stale] + later


def test_budget_is_search_steps_so_the_witness_does_not_depend_on_the_clock(monkeypatch):
    """The same history gives the same verdict, step count and witness
    whatever the clock does: here a clock that jumps an hour at every read
    (a machine so loaded that any time budget would have run out)."""
    history = _stale_read_history()
    quiet = check_operations(history, REGISTER)
    assert quiet.verdict == "not-linearizable" and quiet.witness["minimal"] is True
    assert quiet.witness["op"]["index"] == 7

    import jepsen_like.checker._wgl as wgl

    hours = iter(range(0, 10**9, 3600))
    monkeypatch.setattr(wgl.time, "thread_time", lambda: float(next(hours)))
    loaded = check_operations(history, REGISTER)
    assert (loaded.verdict, loaded.steps, loaded.witness) == (quiet.verdict, quiet.steps, quiet.witness)


def test_a_step_budget_is_exact_search_and_shrinking_share_it():
    """With exactly the steps the search and the shrinking need, the witness
    is minimal; one step fewer and the shrinking runs out (the refutation
    stands, the witness is the deepest blocked point, not minimal); with
    fewer steps than the refutation itself needs, the key is unknown."""
    history = _stale_read_history()
    full = check_operations(history, REGISTER)
    assert check_operations(history, REGISTER, budget_steps=full.steps).witness == full.witness

    short = check_operations(history, REGISTER, budget_steps=full.steps - 1)
    assert short.verdict == "not-linearizable"
    assert short.witness["minimal"] is False and "shrinking" in short.witness["reason"]

    starved = check_operations(history, REGISTER, budget_steps=3)
    assert starved.verdict == "unknown" and starved.steps == 3


def _explosive_key() -> list[Operation]:
    """Sixty concurrent writes of 1, then an ok cas from 2: refuting it takes
    2^60 states (see ``_checker_helpers.explosive_history``)."""
    writes = [op(i, "write", 1, start=0, end=10) for i in range(60)]
    return writes + [op(60, "cas", [2, 3], start=20, end=30)]


_UNLIMITED = 10**15


def test_a_state_budget_is_exact_and_the_reason_says_what_was_explored():
    result = check_operations(_explosive_key(), REGISTER, budget_steps=_UNLIMITED, budget_states=5000)
    assert (result.verdict, result.budget, result.states) == ("unknown", "states", 5000)
    assert result.reason == f"state budget of 5000 explored states used up ({result.steps} steps)"
    again = check_operations(_explosive_key(), REGISTER, budget_steps=_UNLIMITED, budget_states=5000)
    assert (again.steps, again.states) == (result.steps, result.states)  # counts, not clocks


def test_the_time_budget_and_the_deadline_stop_a_search_no_machine_can_finish():
    """2^60 states: no machine finishes before the clock stops it, and the
    counts are out of reach, so which limit ends it does not depend on speed."""
    timed = check_operations(_explosive_key(), REGISTER, budget_steps=_UNLIMITED, budget_states=_UNLIMITED, budget_ms=50)
    assert (timed.verdict, timed.budget) == ("unknown", "time")
    assert timed.reason.startswith("time budget of 50 ms used up after ") and timed.steps > 0
    deadline = time.time() + 0.05
    stopped = check_operations(
        _explosive_key(), REGISTER, budget_steps=_UNLIMITED, budget_states=_UNLIMITED, deadline_at_s=deadline
    )
    assert (stopped.verdict, stopped.budget) == ("unknown", "deadline")
    assert stopped.reason.startswith("deadline: the check's deadline passed after ")
    assert time.time() >= deadline


def test_a_key_begun_after_the_deadline_is_not_searched():
    result = check_operations(_stale_read_history(), REGISTER, deadline_at_s=time.time() - 1)
    assert (result.verdict, result.budget, result.steps) == ("unknown", "deadline", 0)
    assert result.reason == "deadline: the check's deadline passed before this key was searched"


def test_the_reference_search_keeps_the_same_budgets():
    """The naive search counts differently, but stops on the same limits and
    says so the same way."""
    from jepsen_like.checker._wgl import BudgetMeter, KeyBudget, OutOfBudget

    meter = BudgetMeter(KeyBudget(budget_steps=_UNLIMITED, budget_states=300))
    with pytest.raises(OutOfBudget, match=r"^state budget of 300 explored states used up") as stopped:
        first_unlinearizable_naive(_explosive_key(), REGISTER, meter)
    assert stopped.value.budget == "states" and meter.states == 300
    meter = BudgetMeter(KeyBudget(budget_steps=_UNLIMITED, budget_states=_UNLIMITED, budget_ms=50))
    with pytest.raises(OutOfBudget, match="^time budget of 50 ms used up"):
        first_unlinearizable_naive(_explosive_key(), REGISTER, meter)
    # Within its budget it decides as before.
    assert first_unlinearizable_naive(_stale_read_history(), REGISTER, BudgetMeter(KeyBudget())).index == 7


def test_a_budget_below_one_step_is_refused():
    with pytest.raises(ValueError, match="budget_steps must be positive"):
        check_operations(_stale_read_history(), REGISTER, budget_steps=0)


def test_witness_is_the_shortest_refuting_prefix():
    history = [
        op(0, "write", 1, start=0, end=1),
        op(1, "read", start=2, end=3, result=1),
        op(2, "write", 2, start=4, end=5),
        op(3, "read", start=6, end=7, result=1),  # stale: the first point of no return
        op(4, "read", start=8, end=9, result=3),  # also impossible, but later
    ]
    result = check_operations(history, REGISTER)
    assert result.verdict == "not-linearizable"
    witness = result.witness
    assert witness["minimal"] is True
    assert witness["op"]["index"] == 3
    assert [step["index"] for step in witness["linearized"]] == [0, 1, 2]
    assert [step["state"] for step in witness["linearized"]] == [1, 1, 2]
    assert witness["state"] == 2
    assert witness["concurrent"] == []


# ---------------------------------------------------------------------------
# Generated histories: the WGL search and the naive search must agree, on
# the verdict and on the operation the minimal witness names.


@st.composite
def small_histories(draw, model_name: str):
    """A few processes doing a few operations on one key, with overlapping
    intervals, ties, info and failed operations, and values drawn from a
    small set so that reads are sometimes right and sometimes not."""
    processes = draw(st.integers(1, 4))
    operations: list[Operation] = []
    index = 0
    for process in range(processes):
        clock = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(0, 3))):
            start = clock + draw(st.integers(0, 2))
            end = start + draw(st.integers(0, 4))
            outcome = draw(st.sampled_from(["ok", "ok", "ok", "fail", "info"]))
            if model_name == "register":
                f = draw(st.sampled_from(["read", "write", "cas"]))
                value = {"read": None, "write": draw(st.integers(0, 2)),
                         "cas": [draw(st.sampled_from([None, 0, 1, 2])), draw(st.integers(0, 2))]}[f]
                result = draw(st.sampled_from([None, 0, 1, 2])) if f == "read" else None
            else:
                f = draw(st.sampled_from(["get", "put", "append"]))
                value = None if f == "get" else draw(st.sampled_from(["a", "b"]))
                result = draw(st.sampled_from(["", "a", "b", "ab", "ba", "aa"])) if f == "get" else None
            has_completion = outcome != "info" or draw(st.booleans())
            operations.append(op(index, f, value, start=start, end=end if has_completion else None,
                                 outcome=outcome, result=result))
            index += 1
            if outcome == "info":
                break  # a process is never reused after an info
            clock = end + draw(st.integers(0, 1))
    return operations


@given(st.sampled_from(["register", "kv"]).flatmap(lambda name: st.tuples(st.just(name), small_histories(name))))
def test_wgl_agrees_with_the_naive_search(case):
    model_name, operations = case
    model = REGISTER if model_name == "register" else KV
    result = check_operations(operations, model)
    assert result.verdict == ("linearizable" if linearizable_naive(operations, model) else "not-linearizable")
    failing = first_unlinearizable_naive(operations, model)
    if failing is None:
        assert result.witness is None
    else:
        assert result.witness["op"]["index"] == failing.index
