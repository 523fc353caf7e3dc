"""Errors the checker raises about its input."""

from __future__ import annotations


class HistoryFormatError(ValueError):
    """A history, node event log, log dump or meta file does not follow the
    format in docs/checker.md. The message names the file and, where it can,
    the line or event index: it is the input's fault, not the checker's."""


# How deep a value may nest (arrays and objects within arrays and objects:
# [1] nests one level, [[1]] two). Jepsen's values nest a few levels (a
# list-append transaction, three); a deeper one is refused where it enters,
# on every path alike, before any recursive code (Python's JSON decoder in
# the search's workers, the models) meets it and runs out of stack.
VALUE_NESTING_MAX = 100


# The longest number, in characters, a history may write (Jackson's own
# default bound, set explicitly for Spark's reader; the reference checker
# holds to the same). Python's int() refuses past 4,300 digits on its own.
NUMBER_CHARS_MAX = 1000
# What every reader says of a number past it (JSON lines, Parquet values, EDN).
NUMBER_TOO_LONG = f"a number has more than {NUMBER_CHARS_MAX} characters"


def _bounded_number(text: str) -> str:
    if len(text) > NUMBER_CHARS_MAX:
        raise ValueError(NUMBER_TOO_LONG)
    return text


def checked_int(text: str) -> int:
    """``int(text)`` for ``json.loads(parse_int=...)``, refusing a number
    longer than ``NUMBER_CHARS_MAX`` characters (``ValueError``)."""
    return int(_bounded_number(text))


def checked_float(text: str) -> float:
    """``float(text)`` for ``json.loads(parse_float=...)``, bounded alike."""
    return float(_bounded_number(text))


def nests_deeper_than(value: object, levels: int) -> bool:
    """Whether ``value`` (decoded JSON: lists, tuples, dicts, scalars)
    nests more than ``levels`` levels. Iterative: no depth exhausts it."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: object = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth + 1 > levels:
            return True
        pending.extend((child, depth + 1) for child in children)  # type: ignore[attr-defined]
    return False


def too_deep_field(record: dict[str, object]) -> str | None:
    """The first field of a decoded event or record whose value nests
    deeper than ``VALUE_NESTING_MAX`` levels, or None."""
    return next(
        (
            name
            for name, value in record.items()
            if isinstance(value, (list, tuple, dict)) and nests_deeper_than(value, VALUE_NESTING_MAX)
        ),
        None,
    )


def nesting_error(where: str, name: str = "value") -> HistoryFormatError:
    """The error for a field of an event or record that nests too deeply."""
    return HistoryFormatError(f"{where}: {name} nests deeper than {VALUE_NESTING_MAX} levels")
