"""Jepsen's ``history.edn``, read as the checker's history events.

A Jepsen history is a sequence of operation maps, one per line as Jepsen's
store writes it, or one vector of them (as Knossos's test data has it)::

    {:type :invoke, :f :cas, :value [1 2], :process 0, :time 1000, :index 0}
    {:type :ok, :f :cas, :value [1 2], :process 0, :time 2000, :index 1}
    {:type :info, :f :start, :value nil, :process :nemesis, :time 3000, :index 2}

Each map becomes one event of the format docs/checker.md describes:
keywords become their names (``:cas`` -> ``"cas"``, ``:nemesis`` ->
``"nemesis"``), vectors and lists become lists, sets become lists (in the
order of their elements' JSON text), maps become objects (keys by name, or
JSON text), ``nil`` becomes null. Numbers stay what they are: ``1`` is an
integer and ``1.0`` a float, different values as they are in Jepsen.
``:index`` and ``:time`` are optional, but all or none of the operations
must carry each: without ``:index`` an operation's index is its position;
without ``:time`` its time is its index (the history's order is then its
real-time order, as it is for Knossos). Fields the checker does not use
(``:exception``, ``:debug``, ...) are dropped.

The text is parsed by ``edn_format`` (in one pass: it builds its grammar per
call); the line each operation starts on is found by a bracket scan of the
same text, for error messages.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from decimal import Decimal
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, Iterator

from jepsen_like.checker._errors import HistoryFormatError
from jepsen_like.checker._models import canonical_json

# The event fields an operation map may carry (the history format's).
EVENT_FIELDS = (
    "index", "time", "process", "type", "f", "key", "value", "node", "offset", "epoch", "mode", "final",
    "write_id", "broker_id", "broker_epoch", "error",
)

# Jepsen's Op records, if a history was printed with their tag, read as maps.
_JEPSEN_OP_TAG = "jepsen.history.Op"

# Strings, comments and character literals (which may hold brackets), the
# brackets themselves, line breaks, and atoms (keywords, numbers, symbols,
# tags).
_SCAN = re.compile(r'"(?:\\.|[^"\\])*"?|;[^\n]*|\\.|[{}\[\]()]|\n|[^\s,{}\[\]()";\\]+', re.DOTALL)
_LEXPOS = re.compile(r"lexpos (\d+)")


def _edn_module() -> Any:
    try:
        import edn_format
    except ImportError:  # an optional dependency of the checker (pyproject: checker)
        raise HistoryFormatError(
            "reading EDN histories needs the edn_format package (pip install edn_format==0.8.0)"
        ) from None
    return edn_format


def _form_starts(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Where forms start at bracket depth 0 and at depth 1 (the operations
    of a history of maps, and of a history in one vector), as (line number,
    offset). A tag (``#jepsen.history.Op``, the ``#`` of a set) and the form
    it tags are one form."""
    starts: tuple[list[tuple[int, int]], list[tuple[int, int]]] = ([], [])
    depth = 0
    line = 1
    tagged = False  # the previous token was a tag: the next form is its
    for match in _SCAN.finditer(text):
        token = match.group()
        if token == "\n":
            line += 1
            continue
        if token[0] == ";":
            continue
        if token[0] in "}])":
            depth -= 1
            continue
        if depth <= 1 and not tagged:
            starts[depth].append((line, match.start()))
        tagged = token[0] == "#" and token[-1] not in "}])"
        if token[0] in "{[(":
            depth += 1
        elif token[0] in '"\\':
            line += token.count("\n")
    return starts


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _first_unparseable(text: str, edn: Any) -> int | None:
    """The offset of the first top-level form (or element of a top-level
    vector) that does not parse, found by bisection over the forms: for
    errors the parser reports without a position."""
    top, nested = _form_starts(text)
    starts = [offset for _, offset in (top if len(top) > 1 or not nested else nested)]
    if not starts:
        return None

    def parses(count: int) -> bool:
        try:
            edn.loads_all(text[starts[0] : starts[count]], write_ply_tables=False)
        except Exception:  # EDNDecodeError, or edn_format's own errors on a broken form
            return False
        return True

    good, bad = 0, len(starts) - 1  # forms[:good] parse; the failure is at or before forms[bad]
    while good < bad:
        middle = (good + bad + 1) // 2
        if parses(middle):
            good = middle
        else:
            bad = middle - 1
    return starts[good]


def _parse_error(path: Path, text: str, error: Exception, edn: Any) -> HistoryFormatError:
    token = error.args[0] if error.args else None
    position = getattr(token, "lexpos", None)
    reason = ""
    if position is None:
        found = _LEXPOS.search(str(token))
        if found is None:  # the parser said what, not where
            reason = " (the text ends inside this form)" if str(token) == "EOF Reached" else f" ({token})"
        position = int(found.group(1)) if found else _first_unparseable(text, edn)
    if position is not None:
        line = _line_of(text, position)
        excerpt = text.splitlines()[line - 1].strip()[:200] if text.splitlines() else ""
        return HistoryFormatError(f"{path}:{line}: not valid EDN{reason}: {excerpt}")
    if str(token) == "EOF Reached":
        return HistoryFormatError(f"{path}: not valid EDN: the text ends inside a form (an unclosed bracket or string?)")
    return HistoryFormatError(f"{path}: not valid EDN: {token}")


def _name(value: Any, edn: Any) -> str:
    """A keyword or symbol's name (``:foo/bar`` -> ``foo/bar``)."""
    return value.name if isinstance(value, edn.Keyword) else str(value)


def plain(value: Any, edn: Any) -> Any:
    """An EDN value (as ``edn_format`` reads it) as a JSON value.

    Raises ``ValueError`` for a value JSON has nothing for (a non-finite float).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value} has no JSON form")
        return value
    if isinstance(value, (edn.Keyword, edn.Symbol)):
        return _name(value, edn)
    if isinstance(value, Decimal):  # 1.5M: a float to JSON
        return plain(float(value), edn)
    if isinstance(value, Mapping):
        return {_map_key(key, edn): plain(item, edn) for key, item in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted((plain(element, edn) for element in value), key=canonical_json)
    if isinstance(value, Sequence):  # vectors, lists
        return [plain(element, edn) for element in value]
    if isinstance(value, edn.MetadataValue):
        return plain(value.value, edn)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)  # a character, a tagged element


def _map_key(key: Any, edn: Any) -> str:
    key = plain(key, edn)
    return key if isinstance(key, str) else canonical_json(key)


def parse_value(text: str) -> Any:
    """One EDN value given as text (``nil``, ``0``, ``"a"``, ``[1 2]``,
    ``{:x 0}``), as a JSON value; ``null`` is read as nil too.

    Raises ``ValueError`` when ``text`` is not exactly one EDN value.
    """
    edn = _edn_module()
    try:
        values = edn.loads_all(text, write_ply_tables=False)
    except Exception as error:  # EDNDecodeError, or NotImplementedError for an unknown tag
        raise ValueError(f"not an EDN value: {text!r} ({error})") from None
    if len(values) != 1:
        raise ValueError(f"expected one EDN value, got {len(values)}: {text!r}")
    value = values[0]
    if isinstance(value, edn.Symbol) and str(value) == "null":
        return None
    return plain(value, edn)


def _read_forms(path: Path) -> tuple[str, list[Any], Any]:
    edn = _edn_module()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise HistoryFormatError(f"{path}: cannot read: {error}") from None
    if _JEPSEN_OP_TAG not in getattr(edn.edn_parse, "_serializers", {}):
        edn.add_tag(_JEPSEN_OP_TAG, lambda fields: fields)
    try:
        forms = edn.loads_all(text, write_ply_tables=False)
    except edn.EDNDecodeError as error:
        raise _parse_error(path, text, error, edn) from None
    except NotImplementedError as error:  # edn_format's word for an unknown tag
        raise HistoryFormatError(f"{path}: not valid EDN here: {error}") from None
    return text, forms, edn


def iter_edn_events(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The operations of a Jepsen EDN history, in file order, each as
    (where, event): ``where`` is ``FILE:LINE`` (or ``FILE: operation N``
    when lines cannot be told), ``event`` the history format's event.

    Raises :class:`HistoryFormatError` naming the file and line for text
    that is not EDN, an element that is not an operation map, a field EDN
    can give and JSON cannot hold, or ``:index`` / ``:time`` on some
    operations and not others.
    """
    text, forms, edn = _read_forms(path)
    top, nested = _form_starts(text)
    top_lines, nested_lines = [line for line, _ in top], [line for line, _ in nested]
    if len(forms) == 1 and isinstance(forms[0], Sequence) and not isinstance(forms[0], str):
        operations, lines = list(forms[0]), nested_lines
    else:
        operations, lines = forms, top_lines
    if len(lines) != len(operations):
        lines = []  # (a discarded or annotated form) count operations instead
    has_index = has_time = None
    for position, operation in enumerate(operations):
        where = f"{path}:{lines[position]}" if lines else f"{path}: operation {position + 1}"
        if isinstance(operation, edn.MetadataValue):
            operation = operation.value
        if not isinstance(operation, Mapping):
            raise HistoryFormatError(f"{where}: expected an operation map {{:type ... :f ...}}, got {edn.dumps(operation)[:200]}")
        fields: dict[str, Any] = {}
        for raw_name, raw_value in operation.items():
            name = _name(raw_name, edn) if isinstance(raw_name, (edn.Keyword, edn.Symbol, str)) else None
            if name not in EVENT_FIELDS:
                continue
            try:
                fields[name] = plain(raw_value, edn)
            except ValueError as error:
                raise HistoryFormatError(f"{where}: :{name} {error}") from None
        for name, seen in (("index", has_index), ("time", has_time)):
            present = fields.get(name) is not None
            if seen is not None and present != seen:
                raise HistoryFormatError(
                    f"{where}: this operation {'has' if present else 'has no'} :{name} and the first one "
                    f"{'had none' if present else 'had one'}: all operations or none must carry it"
                )
        has_index, has_time = fields.get("index") is not None, fields.get("time") is not None
        if not has_index:
            fields["index"] = position
        if not has_time and isinstance(fields["index"], int):
            fields["time"] = fields["index"]
        yield where, fields


__all__ = ["EVENT_FIELDS", "iter_edn_events", "parse_value", "plain"]
