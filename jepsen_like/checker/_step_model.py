"""A model written as one Python function: your state machine's sequential
specification, checked like the built-in models.

``step(state, op) -> (ok, result, new_state)``: given the state before an
operation and the operation (``{"f": name, "value": argument}``), whether
the operation can happen in that state at all (``ok``), what it returns
(``result``), and the state after it. The linearizability search
(``_wgl``, and the reference checker's naive search) then asks, for every
ordering the history allows, whether each operation that returned ``ok``
returned what ``step`` says, from the state its predecessors left:

- an operation recorded ``ok`` with value ``v`` fits where ``step`` says
  ``ok`` and ``result`` equals ``v`` (compared as canonical JSON, as every
  model compares values);
- an operation recorded ``fail`` certainly did not happen and is dropped
  (a refusal, an overdraft turned down, belongs there);
- an indeterminate one (``info``) may have happened anywhere after its
  invocation, where ``step`` says ``ok``, or not at all.

States and results must be JSON values (dicts with string keys, lists,
strings, numbers, booleans, ``None``): the search memoises on states and
compares results by their canonical JSON text, and ``step`` receives a
fresh copy of the state each time, so it may change it in place.

On the Spark path the model travels to the executors pickled (PySpark's
cloudpickle): the function must be a module-level function or a callable
object whose module the workers can import, or one registered with
:func:`ship_by_value` (what :func:`model_from_step` does for a module that
is not installed, such as a test file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Hashable

from jepsen_like.checker._models import OBSERVE, OK, Model, Operation, Prepared, canonical_json

#: The kind of every operation of a step model that may change the state.
STEP = "step"

StepFunction = Callable[[Any, dict[str, Any]], tuple[bool, Any, Any]]


class _OperationKinds(Mapping[str, str]):
    """Every operation name is the model's: ``queries`` only look at the
    state (a query that did not return ok tells nothing and is dropped),
    the others step it."""

    def __init__(self, queries: frozenset[str]) -> None:
        self.queries = queries

    def __getitem__(self, f: str) -> str:
        if not isinstance(f, str):
            raise KeyError(f)
        return OBSERVE if f in self.queries else STEP

    def get(self, f: Any, default: Any = None) -> Any:
        return self[f] if isinstance(f, str) else default

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.queries))

    def __len__(self) -> int:
        return len(self.queries)


class _Step:
    """The search's step function around the user's: states travel as
    canonical JSON text (hashable, compared by value)."""

    def __init__(self, function: StepFunction, name: str) -> None:
        self.function = function
        self.name = name

    def __call__(self, state: Hashable, prepared: Prepared) -> tuple[bool, Hashable]:
        _, (f, value), observed = prepared
        try:
            ok, result, new_state = self.function(json.loads(state), {"f": f, "value": value})
        except Exception as error:  # the user's model: named, with the operation
            raise ValueError(
                f"model {self.name}: step raised {type(error).__name__}: {error} on {canonical_json({'f': f, 'value': value})}"
            ) from error
        if not ok:
            return False, state
        if observed is not None and canonical_json(result) != observed:
            return False, state
        return True, canonical_json(new_state)


def _prepare(op: Operation) -> Prepared:
    observed = canonical_json(op.value) if op.outcome == OK else None
    return (STEP, (op.f, op.invoke_value), observed)


def _state_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"a step model's state must be a JSON value: {error}") from None


def ship_by_value(function: Callable[..., Any]) -> None:
    """Make PySpark's cloudpickle carry ``function``'s module by value, so
    Spark's Python workers need not be able to import it (a test file, a
    notebook). Modules of the standard library, site-packages and this
    project are left alone. Raises nothing."""
    module_name = getattr(function, "__module__", None) or type(function).__module__
    module = sys.modules.get(module_name)
    if module is None or module_name == "__main__" or module_name.split(".")[0] in ("jepsen_like", "quorum"):
        return
    path = getattr(module, "__file__", None) or ""
    if "site-packages" in path or path.startswith(sys.base_prefix):
        return
    try:
        from pyspark import cloudpickle
    except ImportError:  # the reference path needs no pickling
        return
    cloudpickle.register_pickle_by_value(module)


def model_from_step(
    step: StepFunction,
    initial_state: Any,
    *,
    name: str | None = None,
    queries: tuple[str, ...] | frozenset[str] = (),
) -> Model:
    """A checker model from a sequential specification (see the module
    docstring). ``queries``: the operation names that only read the state.
    ``name`` defaults to ``step``'s qualified name.

    Raises ``TypeError`` when ``step`` is not callable or ``initial_state``
    is not a JSON value.
    """
    if not callable(step):
        raise TypeError(f"step must be a function step(state, op) -> (ok, result, new_state), got {step!r}")
    model_name = name or f"step:{getattr(step, '__qualname__', type(step).__name__)}"
    ship_by_value(step)
    return Model(
        name=model_name,
        kinds=_OperationKinds(frozenset(queries)),
        initial_value=json.loads(_state_text(initial_state)),
        strict=True,
        step=_Step(step, model_name),
        state_of=_state_text,
        value_of_state=json.loads,
        prepare_op=_prepare,
    )


def is_step_model(model: Model) -> bool:
    """Whether ``model`` came from :func:`model_from_step` (it travels to
    Spark's executors whole, not by name)."""
    return isinstance(model.step, _Step)
