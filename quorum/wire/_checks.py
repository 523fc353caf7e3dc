"""Field checks shared by the codec and the wire's own message classes.

Every check takes the value and the field's name, returns the value (so a
decoder can check and build in one expression) and raises ``ValueError``
naming the field. They test ``type(value) is int`` rather than
``isinstance``: ``True`` is an ``int`` to ``isinstance`` but never a valid
epoch, and a decoded msgpack integer is always exactly ``int``.
"""

from __future__ import annotations

from typing import Any

from .._messages import ErrorCode
from .._types import RecordKind

# Node ids are Kafka int32s, non-negative.
NODE_ID_MAX = 2**31 - 1
# Offsets, request ids, read tokens, positions, sizes, correlation ids:
# non-negative int64s, so that any other implementation can hold them (the
# log stores offsets as u64, a snapshot's name as 20 decimal digits).
INT64_MAX = 2**63 - 1
# Epochs are Kafka int32s, non-negative. The log stores a batch's epoch as a
# u32 (quorum/storage/_format.py), so the storage can hold every epoch up to
# 2**32 - 1: a node pushed to the largest epoch a peer may send still has
# 2**31 elections of headroom before its own epoch stops fitting. An epoch
# above this is refused at the edge, never granted, persisted or acted on
# (issue 15: one VoteRequest at 2**32 + 1 used to brick the cluster).
EPOCH_MAX = 2**31 - 1
# The range msgpack itself can carry, for plain values inside an extension.
MSGPACK_INT_MIN = -(2**63)
MSGPACK_INT_MAX = 2**64 - 1

CLUSTER_ID_CHARS_MAX = 255
ERROR_MESSAGE_CHARS_MAX = 4096

# Lookups by the wire value. Callers check ``type(value) is int`` first: a
# bool would otherwise find ``True == 1`` and an unhashable value would raise.
ERROR_CODES: dict[int, ErrorCode] = {int(code): code for code in ErrorCode}
RECORD_KINDS: dict[int, RecordKind] = {int(kind): kind for kind in RecordKind}


def describe_value(value: Any) -> str:
    """A short description of a rejected value for an error text. Never the
    whole value: it may be megabytes, and error texts go to logs."""
    kind = type(value).__name__
    if value is None or type(value) in (bool, int, float):
        text = repr(value)
        return text if len(text) <= 40 else f"{kind} {text[:40]}..."
    if type(value) in (str, bytes):
        text = repr(value[:32])
        return f"{kind} {text}" + ("..." if len(value) > 32 else "")
    if type(value) in (list, tuple, dict):
        return f"{kind} of {len(value)} items"
    return kind


def _fail(name: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {expected}, got {describe_value(value)}")


def check_node_id(value: Any, name: str) -> int:
    if type(value) is int and 0 <= value <= NODE_ID_MAX:
        return value
    raise _fail(name, f"a node id (int 0..{NODE_ID_MAX})", value)


def check_optional_node_id(value: Any, name: str) -> int | None:
    if value is None or (type(value) is int and 0 <= value <= NODE_ID_MAX):
        return value
    raise _fail(name, f"a node id (int 0..{NODE_ID_MAX}) or nil", value)


def check_int64(value: Any, name: str) -> int:
    """A non-negative int64: epoch, offset, request id, position, size..."""
    if type(value) is int and 0 <= value <= INT64_MAX:
        return value
    raise _fail(name, f"an int 0..{INT64_MAX}", value)


def check_optional_int64(value: Any, name: str) -> int | None:
    if value is None or (type(value) is int and 0 <= value <= INT64_MAX):
        return value
    raise _fail(name, f"an int 0..{INT64_MAX} or nil", value)


def check_epoch(value: Any, name: str) -> int:
    """A non-negative int32 epoch (see ``EPOCH_MAX``)."""
    if type(value) is int and 0 <= value <= EPOCH_MAX:
        return value
    raise _fail(name, f"an epoch (int 0..{EPOCH_MAX})", value)


def check_bool(value: Any, name: str) -> bool:
    if type(value) is bool:
        return value
    raise _fail(name, "a bool", value)


def check_bytes(value: Any, name: str, bytes_max: int) -> bytes:
    if type(value) is bytes and len(value) <= bytes_max:
        return value
    raise _fail(name, f"bytes of at most {bytes_max}", value)


def check_str(value: Any, name: str, chars_max: int, *, allow_empty: bool = True) -> str:
    if type(value) is str and len(value) <= chars_max and (allow_empty or value):
        return value
    raise _fail(name, f"a {'' if allow_empty else 'non-empty '}str of at most {chars_max} chars", value)


def check_error_code(value: Any, name: str = "error") -> ErrorCode:
    """An ``ErrorCode`` member, or the int of one (as decoded)."""
    if type(value) is ErrorCode:
        return value
    if type(value) is int:
        code = ERROR_CODES.get(value)
        if code is not None:
            return code
    raise _fail(name, f"a known error code {sorted(ERROR_CODES)}", value)


def check_cluster_id(value: Any, name: str = "cluster_id") -> str:
    """A non-empty str of printable characters: a cluster id is shown in
    log lines and errors, where a newline or an escape code could forge or
    hide a line."""
    if type(value) is str and 0 < len(value) <= CLUSTER_ID_CHARS_MAX and value.isprintable():
        return value
    raise _fail(name, f"a non-empty str of at most {CLUSTER_ID_CHARS_MAX} printable chars", value)


def check_plain_value(value: Any, name: str, *, depth_max: int, items_max: int) -> Any:
    """``value`` is a plain msgpack value: None, bool, int (in msgpack's
    range), float, str, bytes, or a list/tuple/dict of them (dict keys str
    or bytes), nested at most ``depth_max`` containers deep, with at most
    ``items_max`` values and keys in all. Walks iteratively: a hostile or
    self-referencing value can not exhaust the Python stack."""
    items = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        items += 1
        if items > items_max:
            raise ValueError(f"{name} has more than {items_max} values")
        kind = type(item)
        if item is None or kind is bool or kind is float or kind is str or kind is bytes:
            continue
        if kind is int:
            if not MSGPACK_INT_MIN <= item <= MSGPACK_INT_MAX:
                raise ValueError(f"{name} holds an int outside msgpack's range: {describe_value(item)}")
            continue
        if kind is list or kind is tuple or kind is dict:
            if depth >= depth_max:
                raise ValueError(f"{name} nests containers more than {depth_max} deep")
            # Refused before its members are queued: the walk itself must
            # not cost memory in proportion to a hostile container.
            if items + len(pending) + len(item) * (2 if kind is dict else 1) > items_max:
                raise ValueError(f"{name} has more than {items_max} values")
            if kind is dict:
                for key, member in item.items():
                    if type(key) is not str and type(key) is not bytes:
                        raise ValueError(f"{name} has a map key that is not str or bytes: {describe_value(key)}")
                    items += 1
                    pending.append((member, depth + 1))
            else:
                pending.extend((member, depth + 1) for member in item)
            continue
        raise ValueError(f"{name} holds a {kind.__name__}, which is not a plain msgpack value")
    return value
