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

The file is read as a stream (Jepsen's histories run to gigabytes): a
bracket scan splits it into its operations' texts, each at most
:data:`FORM_CHARS_MAX` characters and each with the line it starts on (for
error messages), and ``edn_format`` parses them in batches of a few
megabytes (it builds its grammar on every call, so not one by one). Any
text, however hostile, gives events or a :class:`HistoryFormatError` that
names the file and line: the parser's exceptions are caught by name
(:func:`_parser_errors`), the same set wherever EDN from outside is read.
"""

from __future__ import annotations

import codecs
import datetime
import re
import uuid
from decimal import Decimal
from pathlib import Path
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Iterator

from jepsen_like.checker._errors import (
    NUMBER_CHARS_MAX,
    NUMBER_TOO_LONG,
    VALUE_NESTING_MAX,
    HistoryFormatError,
    nesting_error,
    nests_deeper_than,
)
from jepsen_like.checker._models import canonical_json

# The event fields an operation map may carry (the history format's).
EVENT_FIELDS = (
    "index", "time", "process", "type", "f", "key", "value", "node", "offset", "epoch", "mode", "final",
    "write_id", "broker_id", "broker_epoch", "error",
)

# Jepsen's Op records, if a history was printed with their tag, read as maps.
_JEPSEN_OP_TAG = "jepsen.history.Op"

# One operation's text may be at most this long (a read of a large set is
# the biggest thing a history holds; megabytes are not an operation).
FORM_CHARS_MAX = 16 * 1024 * 1024
# Forms are handed to the parser in batches of about this many characters
# (edn_format builds its grammar on every call: tens of milliseconds, so
# one call per operation would be slow); the file is read in chunks of
# _CHUNK_CHARS. Memory: a batch and a form at most, whatever the file's size.
_BATCH_CHARS = 4 * 1024 * 1024
_CHUNK_CHARS = 1024 * 1024

# Tokens of the bracket scan: strings (maybe not closed yet), comments,
# character literals (which may be brackets), brackets, line breaks, and
# atoms (keywords, numbers, symbols, tags).
_TOKEN = re.compile(
    r'(?P<string>"(?:\\.|[^"\\])*(?P<closed>")?)|(?P<comment>;[^\n]*)|(?P<char>\\.)'
    r'|(?P<open>[{\[(])|(?P<close>[}\])])|(?P<newline>\n)|(?P<atom>[^\s,{}\[\]()";\\]+)',
    re.DOTALL,
)
_LEXPOS = re.compile(r"lexpos (\d+)")
# An atom that is a number (EDN's numbers start with a digit, after an
# optional sign): one longer than NUMBER_CHARS_MAX characters is refused by
# the scan, before the parser meets it, as the JSON-lines readers refuse
# one. The Spark path reads an EDN history as the JSON lines it becomes,
# whose reader has that bound; Python's int() has its own, 4,300 digits.
_NUMBER_START = re.compile(r"[+-]?\d")


def _edn_module() -> Any:
    try:
        import edn_format
    except ImportError:  # an optional dependency of the checker (pyproject: checker)
        raise HistoryFormatError(
            "reading EDN histories needs the edn_format package (pip install edn_format==0.8.0)"
        ) from None
    return edn_format


def _parser_errors(edn: Any) -> tuple[type[BaseException], ...]:
    """Every exception edn_format raises on text it cannot read: its own
    EDNDecodeError, NotImplementedError for an unknown tag, and what its
    value builders raise on a malformed literal (a ``#inst`` or ``#uuid``
    that is not one, a number too odd for ``int``/``Decimal``: ValueError,
    ArithmeticError), a map key that cannot be hashed or a tag given no
    value (TypeError, AttributeError: ``#uuid/`` and ``#inst,`` were found
    by fuzzing), and nesting deeper than Python's recursion limit
    (RecursionError). Caught by name wherever EDN text from outside is
    parsed, never as Exception."""
    return (edn.EDNDecodeError, NotImplementedError, ValueError, ArithmeticError, TypeError, AttributeError,
            IndexError, KeyError, RecursionError)


@dataclass(slots=True)
class _Form:
    line: int  # where it starts
    text: str


class _FormScanner:
    """Splits an EDN history file into its operations' texts without
    holding the file: the top-level forms of a file of operation maps, or
    the elements of a file holding one vector (or list) of them. Only the
    form being read is held, up to ``form_chars_max`` characters.

    A tag (``#jepsen.history.Op``, the ``#`` of a set, ``#_``, ``^:meta``)
    and the form it tags are one form. :meth:`forms` raises
    :class:`HistoryFormatError` (file and line) for a form past the bound,
    a number past ``NUMBER_CHARS_MAX`` characters, an unmatched closing
    bracket, text after the history's vector, and a file that ends inside
    a form."""

    def __init__(self, path: Path, form_chars_max: int) -> None:
        self.path = path
        self.form_chars_max = form_chars_max

    def forms(self, chunks: Iterable[str]) -> Iterator[_Form]:
        """The forms of the text given as ``chunks`` ("" last), in order."""
        buffer = ""
        line = 1  # the line buffer[hold] is on, once a chunk is scanned
        depth = 0
        form_depth: int | None = None  # 0: operation maps one after another; 1: in one vector
        vector_closed = False
        vector_line = 0
        form_start: int | None = None  # where the form being read starts in buffer
        form_line = 0
        tagged = False  # the form so far is tags: the next form is theirs
        scan_from = 0  # buffer[:scan_from] is scanned (the start of the form being read)
        for chunk in chunks:
            eof = not chunk
            buffer += chunk
            # Not at the end of the file, a token touching the last
            # character may go on in the next chunk: scan it then.
            end = len(buffer) if eof else len(buffer) - 1
            hold = end
            for match in _TOKEN.finditer(buffer, scan_from, end):
                kind = match.lastgroup
                if not eof and match.end() == end and kind not in ("open", "close", "newline"):
                    hold = match.start()
                    break
                if kind == "newline":
                    line += 1
                    continue
                if kind == "comment":
                    continue
                if kind == "atom" and match.end() - match.start() > NUMBER_CHARS_MAX and _NUMBER_START.match(match.group()):
                    raise HistoryFormatError(f"{self.path}:{line}: {NUMBER_TOO_LONG}")
                if kind == "closed":
                    kind = "string"
                if kind == "string" and match.group("closed") is None:  # the file ends inside it
                    raise self._ends_inside(form_line if form_start is not None else line, buffer, form_start or match.start())
                if form_depth is None:
                    if kind == "close":
                        raise HistoryFormatError(f"{self.path}:{line}: not valid EDN: an unmatched {match.group()!r}")
                    form_depth = 1 if kind == "open" and match.group() in "[(" else 0
                    if form_depth == 1:
                        depth, vector_line = 1, line
                        continue
                if kind == "close":
                    depth -= 1
                    if depth < form_depth:
                        if form_depth == 1 and depth == 0 and form_start is None and not vector_closed:
                            vector_closed = True
                            continue
                        raise HistoryFormatError(f"{self.path}:{line}: not valid EDN: an unmatched {match.group()!r}")
                    if depth == form_depth and form_start is not None:
                        yield self._form(form_line, buffer[form_start : match.end()])
                        form_start = None
                    continue
                if vector_closed:
                    raise HistoryFormatError(
                        f"{self.path}:{line}: not valid EDN here: more after the history's vector: {match.group()[:40]}"
                    )
                if depth == form_depth:
                    if form_start is None:
                        form_start, form_line = match.start(), line
                    if kind == "atom" and match.group()[0] in "#^":
                        tagged = True
                    else:
                        tagged = False
                        if kind != "open":  # an atom, a string, a character: the whole form
                            yield self._form(form_line, buffer[form_start : match.end()])
                            form_start = None
                if kind == "open":
                    depth += 1
                elif kind == "string":
                    line += match.group().count("\n")
            if eof:
                break
            keep = hold if form_start is None else form_start
            buffer = buffer[keep:]
            scan_from = hold - keep
            if form_start is not None:
                form_start = 0
            if len(buffer) > self.form_chars_max:
                raise self._too_long(form_line if form_start is not None else line, buffer)
        if form_start is not None or tagged:
            raise self._ends_inside(form_line, buffer, form_start or 0)
        if form_depth == 1 and not vector_closed:
            raise HistoryFormatError(
                f"{self.path}:{vector_line}: not valid EDN: the text ends inside the history's vector, opened here"
            )

    def _form(self, line: int, text: str) -> _Form:
        if len(text) > self.form_chars_max:
            raise self._too_long(line, text)
        return _Form(line, text)

    def _too_long(self, line: int, text: str) -> HistoryFormatError:
        excerpt = text[:80].splitlines()[0] if text[:80].strip() else ""
        return HistoryFormatError(
            f"{self.path}:{line}: an operation longer than {self.form_chars_max} characters "
            f"(not a history, or not one this checker reads): {excerpt}..."
        )

    def _ends_inside(self, line: int, buffer: str, start: int) -> HistoryFormatError:
        text = buffer[start : start + 400].strip()
        excerpt = text.splitlines()[0][:200] if text else ""
        return HistoryFormatError(f"{self.path}:{line}: not valid EDN (the text ends inside this form): {excerpt}")


def _read_chunks(path: Path) -> Iterator[str]:
    """The file's text in chunks, then "". Raises :class:`HistoryFormatError`
    for a file that cannot be read, or is not UTF-8 (naming the line)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0
    try:
        with path.open("rb") as handle:
            while True:
                raw = handle.read(_CHUNK_CHARS)
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as error:
                    line = lines_before + raw[: max(0, error.start)].count(b"\n") + 1
                    raise HistoryFormatError(f"{path}:{line}: not UTF-8 text ({error.reason})") from None
                lines_before += raw.count(b"\n")
                if text or not raw:
                    yield text
                if not raw:
                    return
    except OSError as error:
        raise HistoryFormatError(f"{path}: cannot read: {error}") from None


def _parse_error(path: Path, batch: Sequence[_Form], error: BaseException, edn: Any) -> HistoryFormatError:
    """The error for a batch of forms that does not parse, naming the line
    of the form at fault (by the parser's position, else by bisection over
    the forms)."""
    token = error.args[0] if error.args else None
    position = getattr(token, "lexpos", None)
    if position is None:
        found = _LEXPOS.search(str(token))
        position = int(found.group(1)) if found else None
    if isinstance(error, NotImplementedError):  # edn_format's word for an unknown tag
        reason = f" here: {error}"
    elif position is not None or isinstance(error, edn.EDNDecodeError):
        reason = " (the text ends inside this form)" if str(token) == "EOF Reached" else ""
        if position is None and str(token) != "EOF Reached":
            reason = f" ({token})"
    else:
        reason = f" ({type(error).__name__}: {str(error)[:200]})"
    at_fault, line = None, 0
    if position is not None:
        offset = 0
        for form in batch:
            if position < offset + len(form.text) + 1:
                at_fault, line = form, form.line + form.text.count("\n", 0, max(0, position - offset))
                break
            offset += len(form.text) + 1
    if at_fault is None:
        at_fault = _first_unparseable(batch, edn)
        line = at_fault.line
    excerpt = at_fault.text.splitlines()[line - at_fault.line].strip()[:200] if at_fault.text.strip() else ""
    return HistoryFormatError(f"{path}:{line}: not valid EDN{reason}: {excerpt}")


def _first_unparseable(batch: Sequence[_Form], edn: Any) -> _Form:
    """The first form of ``batch`` that does not parse after the ones
    before it, by bisection (for errors the parser reports without a
    position)."""
    errors = _parser_errors(edn)

    def parses(count: int) -> bool:
        try:
            edn.loads_all("\n".join(form.text for form in batch[:count]), write_ply_tables=False)
        except errors:
            return False
        return True

    good, bad = 0, len(batch)  # batch[:good] parses, batch[:bad] does not
    while bad - good > 1:
        middle = (good + bad) // 2
        if parses(middle):
            good = middle
        else:
            bad = middle
    return batch[bad - 1]


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


def _has_long_number(text: str) -> bool:
    """Whether ``text`` holds a number past NUMBER_CHARS_MAX characters
    (as the history scan tells it; a short text cannot)."""
    if len(text) <= NUMBER_CHARS_MAX:
        return False
    return any(
        match.lastgroup == "atom" and match.end() - match.start() > NUMBER_CHARS_MAX and _NUMBER_START.match(match.group())
        for match in _TOKEN.finditer(text)
    )


def parse_value(text: str) -> Any:
    """One EDN value given as text (``nil``, ``0``, ``"a"``, ``[1 2]``,
    ``{:x 0}``), as a JSON value; ``null`` is read as nil too.

    Raises ``ValueError`` when ``text`` is not exactly one EDN value.
    """
    edn = _edn_module()
    if _has_long_number(text):
        raise ValueError(f"not an EDN value this checker reads: {text[:200]!r} ({NUMBER_TOO_LONG})")
    try:
        values = edn.loads_all(text, write_ply_tables=False)
    except _parser_errors(edn) as error:
        raise ValueError(f"not an EDN value: {text!r} ({type(error).__name__}: {str(error)[:200]})") from None
    if len(values) != 1:
        raise ValueError(f"expected one EDN value, got {len(values)}: {text!r}")
    value = values[0]
    if isinstance(value, edn.Symbol) and str(value) == "null":
        return None
    try:
        converted = plain(value, edn)
        too_deep = nests_deeper_than(converted, VALUE_NESTING_MAX)
    except RecursionError:
        too_deep = True
    if too_deep:
        raise ValueError(f"not an EDN value this checker reads: {text[:200]!r} (nests deeper than {VALUE_NESTING_MAX} levels)")
    return converted


def _batches(forms: Iterator[_Form], batch_chars: int) -> Iterator[list[_Form]]:
    batch: list[_Form] = []
    size = 0
    for form in forms:
        batch.append(form)
        size += len(form.text) + 1
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _read_operations(path: Path, form_chars_max: int) -> Iterator[tuple[str, Any]]:
    """(where, value) for each operation form of the file, parsed batch by
    batch; ``where`` is ``FILE:LINE``, or ``FILE: operation N`` in a batch
    whose forms and values cannot be paired (a discarded form, ``#_``)."""
    edn = _edn_module()
    if _JEPSEN_OP_TAG not in getattr(edn.edn_parse, "_serializers", {}):
        edn.add_tag(_JEPSEN_OP_TAG, lambda fields: fields)
    errors = _parser_errors(edn)
    scanner = _FormScanner(path, form_chars_max)
    count = 0
    for batch in _batches(scanner.forms(_read_chunks(path)), _BATCH_CHARS):
        try:
            values = edn.loads_all("\n".join(form.text for form in batch), write_ply_tables=False)
        except errors as error:
            raise _parse_error(path, batch, error, edn) from None
        paired = len(values) == len(batch)
        for number, value in enumerate(values):
            count += 1
            yield (f"{path}:{batch[number].line}" if paired else f"{path}: operation {count}"), value


def iter_edn_events(path: Path, *, form_chars_max: int = FORM_CHARS_MAX) -> Iterator[tuple[str, dict[str, Any]]]:
    """The operations of a Jepsen EDN history, in file order, each as
    (where, event): ``where`` is ``FILE:LINE`` (or ``FILE: operation N``
    when lines cannot be told), ``event`` the history format's event. The
    file is read as a stream: one operation's text at a time (at most
    ``form_chars_max`` characters), parsed in batches.

    Raises :class:`HistoryFormatError` naming the file and line for text
    that is not EDN (whatever the parser raised), an operation longer than
    the bound, a number longer than ``NUMBER_CHARS_MAX`` characters, an element that is not an operation map, a field EDN can
    give and JSON cannot hold, or ``:index`` / ``:time`` on some operations
    and not others.
    """
    edn = _edn_module()
    has_index = has_time = None
    for position, (where, operation) in enumerate(_read_operations(path, form_chars_max)):
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
            except RecursionError:
                raise nesting_error(where, f":{name}") from None
            if nests_deeper_than(fields[name], VALUE_NESTING_MAX):
                raise nesting_error(where, f":{name}")
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


__all__ = ["EVENT_FIELDS", "FORM_CHARS_MAX", "iter_edn_events", "parse_value", "plain"]
