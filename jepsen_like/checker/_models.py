"""Operations, and the sequential specifications they are checked against.

An :class:`Operation` is one client call: its invoke event and its completion
event (if the history has one), paired by process. The models here are the
single-object specifications that the linearizability search (``_wgl``) and
the reference checker step through: a compare-and-set register and a string
key-value cell with append (Jepsen's other models, built on the same
``Model``, are in ``_model_catalog``).

Values are kept as decoded JSON. Model states are kept in a hashable form
(canonical JSON text for the register, the plain string for kv) because the
search memoises on (linearized set, state).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Hashable, Mapping, Sequence

from jepsen_like.checker._errors import VALUE_NESTING_MAX, HistoryFormatError, nests_deeper_than

# What an operation does to a single object, whatever the model calls it.
READ = "read"
WRITE = "write"
CAS = "cas"
APPEND = "append"
# What the models of _model_catalog do besides these: observe the state
# without changing it (a set's or a counter's read), or change it their own
# way (a transaction, a lock, an add).
OBSERVE = "observe"
TXN = "txn"
ACQUIRE = "acquire"
RELEASE = "release"
ADD = "add"
# Kinds that only look at the state: an operation of one of these kinds that
# did not return ok tells nothing and is dropped before the search.
QUERY_KINDS = (READ, OBSERVE)

OK = "ok"
FAIL = "fail"
INFO = "info"

# Read modes (design.md, "Consistency contract"). A read without a mode is
# linearizable: that is what plain register histories from other systems mean.
MODE_LINEARIZABLE = "linearizable"
MODE_LEADER_LOCAL = "leader-local"
MODE_BROKER = "broker"
READ_MODES = (MODE_LINEARIZABLE, MODE_LEADER_LOCAL, MODE_BROKER)

# Optional per-operation fields the checker understands, in the order results
# list them. Completion fields win over invoke fields when both are present,
# except for the request-side ones (see ``_REQUEST_SIDE_FIELDS``).
OPTIONAL_FIELDS = (
    "node",
    "offset",
    "epoch",
    "mode",
    "final",
    "write_id",
    "broker_id",
    "broker_epoch",
    "error",
)
# Fields that describe the request rather than the answer: taken from the
# invoke event first.
_REQUEST_SIDE_FIELDS = frozenset({"mode", "final", "write_id", "broker_id", "broker_epoch"})


def canonical_json(value: Any) -> str:
    """The one JSON text the checker compares values by (``value`` as
    Python's ``json`` module decodes it).

    Keys sorted, no spaces, non-ASCII kept. A number written with a fraction
    or an exponent is a float and keeps a fraction in its text (``1.0``), an
    integer has none (``1``): they differ, as Clojure's ``=`` on a Long and a
    Double does in Jepsen and Knossos (docs/checker.md, "Numbers"). The Spark
    job gets the same text through :func:`variant_json`.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_numbers(value: Any) -> Any:
    if isinstance(value, Decimal):
        # A Spark variant keeps a JSON number with a fraction as a decimal
        # with its scale (1.0: scale 1), and an integer too long for 64 bits
        # as a decimal of scale 0.
        return int(value) if value.as_tuple().exponent >= 0 else float(value)
    if isinstance(value, list):
        return [_json_numbers(item) for item in value]
    if isinstance(value, dict):
        return {name: _json_numbers(item) for name, item in value.items()}
    return value


def variant_json(value: Any) -> str:
    """:func:`canonical_json` of a value decoded from a Spark variant
    (``VariantVal.toPython()``), where numbers may be ``Decimal``."""
    return canonical_json(_json_numbers(value))


@dataclass(frozen=True, slots=True)
class Operation:
    """One client operation: an invoke and its completion.

    ``outcome`` is the completion's type, or ``info`` when the history has no
    completion. ``return_ns`` is the completion time for ``ok`` and ``fail``
    only: an ``info`` operation may take effect at any time after its invoke,
    or never, so it has no return as far as real-time order goes.
    ``complete_ns`` is the time of the completion event whatever its type
    (``None`` without one); it is kept for witnesses.
    """

    index: int
    process: int
    f: str
    key: str | None
    outcome: str
    invoke_value: Any
    value: Any
    call_ns: int
    return_ns: int | None
    complete_index: int | None = None
    complete_ns: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def mode(self) -> str | None:
        return self.extra.get("mode")

    @property
    def offset(self) -> int | None:
        return self.extra.get("offset")


def merge_optional_fields(invoke: Mapping[str, Any], completion: Mapping[str, Any] | None) -> dict[str, Any]:
    """The optional fields of an operation, from its two events.

    Answer-side fields (``node``, ``offset``, ``epoch``, ``error``) come from
    the completion when it has them: that is where the server's answer is.
    Request-side fields (``mode``, ``final``, ``write_id``, ``broker_id``,
    ``broker_epoch``) come from the invoke first.
    """
    merged: dict[str, Any] = {}
    completion = completion or {}
    for name in OPTIONAL_FIELDS:
        first, second = (invoke, completion) if name in _REQUEST_SIDE_FIELDS else (completion, invoke)
        value = first.get(name)
        if value is None:
            value = second.get(name)
        if value is not None:
            merged[name] = value
    return merged


def render_operation(op: Operation) -> dict[str, Any]:
    """An operation as results list it: the exact events it was made from.

    ``index``/``time``/``invoke_value`` are the invoke event's; ``type``,
    ``value``, ``complete_index`` and ``complete_time`` the completion's
    (absent when the history has no completion).
    """
    rendered: dict[str, Any] = {
        "index": op.index,
        "process": op.process,
        "f": op.f,
        "key": op.key,
        "type": op.outcome,
        "time": op.call_ns,
        "invoke_value": op.invoke_value,
    }
    if op.complete_index is not None:
        rendered["complete_index"] = op.complete_index
        rendered["complete_time"] = op.complete_ns
        rendered["value"] = op.value
    if rendered["key"] is None:
        del rendered["key"]
    for name in OPTIONAL_FIELDS:
        if name in op.extra:
            rendered[name] = op.extra[name]
    return rendered


def operation_from_row(row: Mapping[str, Any]) -> Operation:
    """An operation from a row of the Spark job's operations table (values
    as JSON text in ``arg`` / ``ret``; times in ``t_inv`` / ``t_done``)."""
    return Operation(
        index=row["index"],
        process=row["process"],
        f=row["f"],
        key=row["key"],
        outcome=row["outcome"],
        invoke_value=json.loads(row["arg"]),
        value=json.loads(row["ret"]) if row["ret"] is not None else None,
        call_ns=row["t_inv"],
        return_ns=row["t_done"],
        complete_index=row["complete_index"],
        complete_ns=row["complete_time"],
        extra={name: row[name] for name in OPTIONAL_FIELDS if row[name] is not None},
    )


# A prepared search input: (kind, argument, second argument).
Prepared = tuple


def _step_register(state: str, prepared: Prepared) -> tuple[bool, str]:
    kind, first, second = prepared
    if kind is READ:
        return first == state, state
    if kind is WRITE:
        return True, first
    # CAS: takes effect only when the current value is the expected one. An
    # ok cas whose expected value is not current cannot be linearized here;
    # an info cas in that position simply did not happen (it never has to be
    # linearized).
    if state == first:
        return True, second
    return False, state


def _step_kv(state: str, prepared: Prepared) -> tuple[bool, str]:
    kind, first, _ = prepared
    if kind is READ:
        return first == state, state
    if kind is WRITE:
        return True, first
    return True, state + first  # APPEND


@dataclass(frozen=True, slots=True)
class Model:
    """A single-object sequential specification.

    ``kinds`` maps an operation name (``f``) to what it does (read / write /
    cas / append). ``strict`` models reject operation names they do not know;
    the metadata model lets them through (they are the metadata operations
    that tier 1 checks and tier 2 does not model).
    """

    name: str
    kinds: Mapping[str, str]
    initial_value: Any
    strict: bool
    step: Callable[[Hashable, Prepared], tuple[bool, Hashable]]
    state_of: Callable[[Any], Hashable]
    value_of_state: Callable[[Hashable], Any]
    # The search input of an operation, for models whose operations are not
    # reads, writes, cas or appends of one value (it raises TypeError or
    # ValueError, with what is wrong, for a value that does not fit).
    prepare_op: Callable[[Operation], Prepared] | None = None
    # A per-key check that replaces the linearizability search: given the
    # key's operations (failed ones and non-ok queries already dropped),
    # the first operation that breaks the model and a witness of why, or
    # None (the counter's bounds, _model_catalog).
    key_check: Callable[[Sequence[Operation], Any], tuple[Operation, dict[str, Any]] | None] | None = None

    @property
    def initial_state(self) -> Hashable:
        return self.state_of(self.initial_value)

    def with_initial_value(self, value: Any) -> "Model":
        """This model starting from ``value`` instead of its own initial value.

        Raises ``ValueError`` when ``value`` is not a state of this model,
        or nests deeper than ``VALUE_NESTING_MAX`` levels.
        """
        if nests_deeper_than(value, VALUE_NESTING_MAX):
            raise ValueError(f"the initial value nests deeper than {VALUE_NESTING_MAX} levels")
        try:
            self.state_of(value)
        except (TypeError, ValueError) as error:
            raise ValueError(f"initial value {canonical_json(value)} does not fit the {self.name} model: {error}") from None
        return replace(self, initial_value=value)

    def kind_of(self, f: str) -> str | None:
        """What ``f`` does, or ``None`` if this model does not model it."""
        return self.kinds.get(f)

    def prepare(self, op: Operation) -> Prepared:
        """The search input for ``op``.

        Raises :class:`HistoryFormatError` when the operation's value does not
        fit the model (a cas without ``[expected, new]``, a non-string kv value).
        """
        if self.prepare_op is not None:
            try:
                return self.prepare_op(op)
            except (TypeError, ValueError) as error:
                raise HistoryFormatError(f"operation at index {op.index} ({op.f} on key {op.key!r}): {error}") from None
        kind = self.kinds[op.f]
        if kind is READ:
            return (READ, self._state_value(op, op.value), None)
        if kind is WRITE or kind is APPEND:
            return (kind, self._state_value(op, op.invoke_value), None)
        expected, new = cas_arguments(op)
        return (CAS, self._state_value(op, expected), self._state_value(op, new))

    def _state_value(self, op: Operation, value: Any) -> Hashable:
        try:
            return self.state_of(value)
        except TypeError as error:
            raise HistoryFormatError(
                f"operation at index {op.index} ({op.f} on key {op.key!r}): {error}"
            ) from None


def cas_arguments(op: Operation) -> tuple[Any, Any]:
    """``(expected, new)`` of a cas operation.

    Raises :class:`HistoryFormatError` unless the invoke value is a
    two-element list.
    """
    value = op.invoke_value
    if not isinstance(value, list) or len(value) != 2:
        raise HistoryFormatError(
            f"cas at index {op.index} must have value [expected, new], got {canonical_json(value)}"
        )
    return value[0], value[1]


def _kv_state(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"kv values must be strings, got {canonical_json(value)}")
    return value


REGISTER = Model(
    name="register",
    kinds={"read": READ, "write": WRITE, "cas": CAS},
    initial_value=None,
    strict=True,
    step=_step_register,
    state_of=canonical_json,
    value_of_state=json.loads,
)

# The metadata workload's keyed state is a register too; its other operations
# (broker registration, heartbeats, ...) are checked by tier 1 only.
METADATA = Model(
    name="metadata",
    kinds={"read": READ, "write": WRITE, "cas": CAS},
    initial_value=None,
    strict=False,
    step=_step_register,
    state_of=canonical_json,
    value_of_state=json.loads,
)

# Porcupine's kv model: get returns the value, put sets, append concatenates.
KV = Model(
    name="kv",
    kinds={"get": READ, "put": WRITE, "append": APPEND},
    initial_value="",
    strict=True,
    step=_step_kv,
    state_of=_kv_state,
    value_of_state=lambda state: state,
)

KV_OPERATION_NAMES = frozenset(KV.kinds)


def is_tier2_candidate(op: Operation, model: Model) -> bool:
    """Whether the linearizability search looks at ``op`` at all.

    Operations the model does not know, and reads whose contract is bounded
    staleness rather than linearizability (leader-local and broker reads), are
    left to tier 1. Failed operations and reads without an ``ok`` are dropped
    later, by the search itself.
    """
    kind = model.kind_of(op.f)
    if kind is None:
        return False
    return not (kind is READ and op.mode in (MODE_LEADER_LOCAL, MODE_BROKER))


def dropped_by_search(op: Operation, model: Model) -> bool:
    """Whether the search leaves ``op`` out: it failed (it certainly did not
    take effect), or it only looks at the state and did not return ok (what
    it saw is unknown)."""
    return op.outcome == FAIL or (model.kind_of(op.f) in QUERY_KINDS and op.outcome != OK)
