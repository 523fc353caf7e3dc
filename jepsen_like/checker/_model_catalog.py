"""Every model a history can be checked against, by name.

``register``, ``kv`` and ``metadata`` are defined in ``_models``. Here are
the models Jepsen users check most, under Knossos's names, as ``Model``
objects that the same per-key search (``_wgl``, and the reference checker's
naive search) steps through, so they get the same witnesses:

- ``cas-register``: the register (``read``, ``write``, ``cas [expected
  new]``), by the name Jepsen tests give it;
- ``multi-register``: one ``txn`` operation whose value is a list of
  ``[f key value]`` micro-operations (``f``: ``read``/``r`` or
  ``write``/``w``) applied atomically, in order, to a map of registers:
  linearizable across keys. As in Knossos, a read of ``nil`` is always
  legal (Jepsen's invocations carry ``nil`` for what a read will return);
- ``mutex``: ``acquire`` (legal when free) and ``release`` (legal when held);
- ``set``: ``add`` an element and ``read`` the whole set, linearizable
  (Knossos's set): a read returns exactly the elements added before it;
- ``counter``: ``add n`` and ``read``, checked as Jepsen's counter checker
  checks it, not by a linearization: each ok read lies between the sum of
  the adds certainly done before it and the sum of those that may have been
  (:func:`counter_bounds`).

Values are compared by their canonical JSON text (``_models.canonical_json``):
``1`` and ``1.0`` are different elements, registers, counter values.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from dataclasses import replace
from itertools import accumulate
from typing import Any, Hashable, Sequence

from jepsen_like.checker._models import (
    ACQUIRE,
    ADD,
    KV,
    METADATA,
    OBSERVE,
    OK,
    QUERY_KINDS,
    READ,
    REGISTER,
    RELEASE,
    TXN,
    WRITE,
    Model,
    Operation,
    Prepared,
    canonical_json,
    render_operation,
)

_NULL_TEXT = canonical_json(None)


def _key_text(key: Any) -> str:
    """Registers of a multi-register are named by text, as the history's
    ``key`` field is: a string as is, anything else as its JSON text."""
    return key if isinstance(key, str) else canonical_json(key)


# --- multi-register -----------------------------------------------------------

_MICRO_OPERATIONS = {"read": READ, "r": READ, "write": WRITE, "w": WRITE}


def _prepare_txn(op: Operation) -> Prepared:
    # An ok transaction's completion carries what its reads returned; an
    # indeterminate one has only its invocation (reads of nil).
    value = op.value if op.outcome == OK and isinstance(op.value, list) else op.invoke_value
    if not isinstance(value, list):
        raise TypeError(f"a txn's value must be a list of [f key value], got {canonical_json(value)}")
    micro_operations = []
    for micro in value:
        if not (isinstance(micro, list) and len(micro) == 3 and isinstance(micro[0], str) and micro[0] in _MICRO_OPERATIONS):
            raise TypeError(f"a txn's micro-operations must be [read|write key value], got {canonical_json(micro)}")
        kind = _MICRO_OPERATIONS[micro[0]]
        if kind is READ and micro[2] is None:
            continue  # a nil read is always legal (Knossos's multi-register)
        micro_operations.append((kind, _key_text(micro[1]), canonical_json(micro[2])))
    return (TXN, tuple(micro_operations), None)


def _step_txn(state: tuple, prepared: Prepared) -> tuple[bool, tuple]:
    _, micro_operations, _ = prepared
    registers = dict(state)
    for kind, key, text in micro_operations:
        if kind is READ:
            if registers.get(key, _NULL_TEXT) != text:
                return False, state
        elif text == _NULL_TEXT:
            registers.pop(key, None)  # unwritten and nil are one state
        else:
            registers[key] = text
    return True, tuple(sorted(registers.items()))


def _multi_register_state(value: Any) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise TypeError(f"a multi-register's state is a map of keys to values, got {canonical_json(value)}")
    return tuple(sorted((key, canonical_json(item)) for key, item in value.items() if item is not None))


def _multi_register_value(state: tuple) -> dict[str, Any]:
    return {key: json.loads(text) for key, text in state}


# --- mutex -------------------------------------------------------------------


def _prepare_lock(op: Operation) -> Prepared:
    return (MUTEX.kinds[op.f], None, None)


def _step_mutex(held: bool, prepared: Prepared) -> tuple[bool, bool]:
    if prepared[0] is ACQUIRE:
        return (False, held) if held else (True, True)
    return (True, False) if held else (False, held)


def _mutex_state(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"a mutex's state is true (held) or false (free), got {canonical_json(value)}")
    return value


# --- set -----------------------------------------------------------------------


def _elements(value: Any, what: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list of elements, got {canonical_json(value)}")
    return frozenset(canonical_json(element) for element in value)


def _prepare_set(op: Operation) -> Prepared:
    if SET.kinds[op.f] is ADD:
        return (ADD, canonical_json(op.invoke_value), None)
    return (OBSERVE, _elements(op.value, "a set's read"), None)


def _step_set(state: frozenset[str], prepared: Prepared) -> tuple[bool, frozenset[str]]:
    kind, argument, _ = prepared
    if kind is ADD:
        return True, state if argument in state else state | {argument}
    return argument == state, state


def _set_state(value: Any) -> frozenset[str]:
    return frozenset() if value is None else _elements(value, "a set's state")


def _set_value(state: frozenset[str]) -> list[Any]:
    return [json.loads(text) for text in sorted(state)]


# --- counter -------------------------------------------------------------------


def _integer(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {canonical_json(value)}")
    return value


def _prepare_counter(op: Operation) -> Prepared:
    if COUNTER.kinds[op.f] is ADD:
        return (ADD, _integer(op.invoke_value, "a counter's add"), None)
    return (OBSERVE, _integer(op.value, "a counter's read"), None)


def _step_counter(state: int, prepared: Prepared) -> tuple[bool, int]:
    kind, argument, _ = prepared
    if kind is ADD:
        return True, state + argument
    return argument == state, state


def counter_bounds(operations: Sequence[Operation], model: Model) -> tuple[Operation, dict[str, Any]] | None:
    """Jepsen's counter check of one key's operations (failed ones and
    non-ok reads already dropped): every ok read must lie within

    - lower: the initial value, plus every ok add that completed before the
      read was invoked, plus the negative adds among those that may have
      happened before it completed (ok or info, invoked by then);
    - upper: the same with the positive adds that may have happened.

    (With only non-negative adds, as Jepsen assumes: [sum of acknowledged
    adds, sum of attempted adds].) Intervals are closed: an add that
    completed at the instant the read was invoked may or may not be in it.

    Returns None, or the first read out of bounds (by completion) and its
    witness: the read, ``lower``, ``upper``, and how many reads are out of
    bounds. O(n log n).
    """
    initial = model.initial_value
    adds = [op for op in operations if model.kind_of(op.f) is ADD]
    reads = sorted((op for op in operations if model.kind_of(op.f) is OBSERVE), key=lambda op: (op.return_ns, op.index))
    done = sorted((op.return_ns, op.invoke_value) for op in adds if op.outcome == OK)
    done_times = [time for time, _ in done]
    done_sum = [0, *accumulate(amount for _, amount in done)]
    done_up = [0, *accumulate(max(0, amount) for _, amount in done)]
    done_down = [0, *accumulate(min(0, amount) for _, amount in done)]
    started = sorted((op.call_ns, op.invoke_value) for op in adds)
    started_times = [time for time, _ in started]
    started_up = [0, *accumulate(max(0, amount) for _, amount in started)]
    started_down = [0, *accumulate(min(0, amount) for _, amount in started)]
    first: tuple[Operation, dict[str, Any]] | None = None
    out_of_bounds = 0
    for read in reads:
        # Adds certainly before the read, and adds that may be (every add
        # certainly before it was also invoked before it completed).
        certain = bisect_left(done_times, read.call_ns)
        possible = bisect_right(started_times, read.return_ns)
        base = initial + done_sum[certain]
        lower = base + started_down[possible] - done_down[certain]
        upper = base + started_up[possible] - done_up[certain]
        if not lower <= read.value <= upper:
            out_of_bounds += 1
            if first is None:
                first = (read, {"op": render_operation(read), "minimal": True, "lower": lower, "upper": upper})
    if first is not None:
        first[1]["reads_out_of_bounds"] = out_of_bounds
    return first


# --- the catalog ---------------------------------------------------------------

CAS_REGISTER = replace(REGISTER, name="cas-register")

MULTI_REGISTER = Model(
    name="multi-register",
    kinds={"txn": TXN},
    initial_value=None,
    strict=True,
    step=_step_txn,
    state_of=_multi_register_state,
    value_of_state=_multi_register_value,
    prepare_op=_prepare_txn,
)

MUTEX = Model(
    name="mutex",
    kinds={"acquire": ACQUIRE, "release": RELEASE},
    initial_value=False,
    strict=True,
    step=_step_mutex,
    state_of=_mutex_state,
    value_of_state=lambda held: held,
    prepare_op=_prepare_lock,
)

SET = Model(
    name="set",
    kinds={"add": ADD, "read": OBSERVE},
    initial_value=None,
    strict=True,
    step=_step_set,
    state_of=_set_state,
    value_of_state=_set_value,
    prepare_op=_prepare_set,
)

COUNTER = Model(
    name="counter",
    kinds={"add": ADD, "read": OBSERVE},
    initial_value=0,
    strict=True,
    step=_step_counter,
    state_of=lambda value: _integer(value, "a counter's state"),
    value_of_state=lambda value: value,
    prepare_op=_prepare_counter,
    key_check=counter_bounds,
)

MODELS: dict[str, Model] = {
    model.name: model for model in (REGISTER, CAS_REGISTER, KV, METADATA, MULTI_REGISTER, MUTEX, SET, COUNTER)
}
MODEL_NAMES = tuple(MODELS)


class _ModelDefault:
    def __repr__(self) -> str:
        return "MODEL_DEFAULT"


# ``initial_value`` of :func:`get_model` when none is given (``None`` is a value).
MODEL_DEFAULT: Any = _ModelDefault()


def get_model(name: str | Model, initial_value: Any = MODEL_DEFAULT) -> Model:
    """The model called ``name`` (or ``name`` itself when it is a
    ``Model``, such as one from ``model_from_step``), starting from
    ``initial_value`` when one is given (``None`` is one: Jepsen's ``nil``).

    Raises ``ValueError`` for an unknown name, or an initial value that is
    not a state of the model.
    """
    if isinstance(name, Model):
        model = name
    else:
        try:
            model = MODELS[name]
        except KeyError:
            raise ValueError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}") from None
    if initial_value is MODEL_DEFAULT:
        return model
    return model.with_initial_value(initial_value)


def shape_error(model_name: str, f: str, outcome: str, arg_text: str, ret_text: str | None) -> str | None:
    """What is wrong with an operation's values under a model that prepares
    its own operations (``Model.prepare_op``), or None: the Spark job's
    counterpart of the reference checker calling ``Model.prepare``.
    ``arg_text`` / ``ret_text`` are the invoke's and completion's values as
    JSON text."""
    model = MODELS.get(model_name)
    if model is None:  # a model of the user's own (model_from_step) prepares anything
        return None
    kind = model.kind_of(f)
    if model.prepare_op is None or kind is None or (kind in QUERY_KINDS and outcome != OK):
        return None
    op = Operation(
        index=0, process=0, f=f, key=None, outcome=outcome, invoke_value=json.loads(arg_text),
        value=json.loads(ret_text) if ret_text is not None else None, call_ns=0, return_ns=None,
    )
    try:
        model.prepare_op(op)
    except (TypeError, ValueError) as error:
        return str(error)
    return None


__all__ = [
    "CAS_REGISTER",
    "COUNTER",
    "MODELS",
    "MODEL_DEFAULT",
    "MODEL_NAMES",
    "MULTI_REGISTER",
    "MUTEX",
    "SET",
    "counter_bounds",
    "get_model",
    "shape_error",
]
