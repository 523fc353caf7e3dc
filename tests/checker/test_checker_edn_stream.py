"""Reading Jepsen EDN as a stream (issue 19's review): one operation's text
at a time, bounded; whatever the bytes, the reader gives events or the
checker's error naming the file and line, never another exception."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jepsen_like.checker._edn as edn_reader
from jepsen_like.checker import HistoryFormatError
from jepsen_like.checker._edn import iter_edn_events, parse_value

EDN_DIR = Path(__file__).resolve().parent / "data" / "edn"


def test_chunks_and_batches_of_any_size_read_the_same_events(monkeypatch):
    """Every fixture, in both layouts (operation maps one after another, one
    vector of them), read in chunks that cut strings, keywords, tags and
    brackets anywhere: the same events and lines as in one chunk."""
    paths = sorted(EDN_DIR.glob("*.edn"))
    whole = {path: list(iter_edn_events(path)) for path in paths}
    monkeypatch.setattr(edn_reader, "_CHUNK_CHARS", 5)
    monkeypatch.setattr(edn_reader, "_BATCH_CHARS", 300)
    for path in paths:
        assert list(iter_edn_events(path)) == whole[path], path


def test_tags_comments_and_strings_with_brackets_stay_in_their_operation(tmp_path, monkeypatch):
    path = tmp_path / "history.edn"
    path.write_text(
        '; a comment with a bracket [ and a "quote\n'
        '#jepsen.history.Op{:type :invoke, :f :write, :value "}]\\"x\n y", :process 0, :index 0}\n'
        '#_ {:type :ignored}\n'
        '{:type :ok, :f :write, :value "}]\\"x\n y", :process 0, :index 1, :error \\}}\n'
    )
    monkeypatch.setattr(edn_reader, "_CHUNK_CHARS", 5)
    events = list(iter_edn_events(path))
    assert [event["value"] for _, event in events] == ['}]"x\n y', '}]"x\n y']
    # The discarded form leaves its batch's forms and values unpaired:
    # operations are then counted, not lined.
    assert [where for where, _ in events][0].startswith(f"{path}")


def test_an_operation_longer_than_the_bound_is_refused_with_its_line(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text('{:type :invoke, :f :write, :value 1, :process 0}\n\n{:type :ok, :f :write, :value "' + "x" * 500 + '", :process 0}\n')
    with pytest.raises(HistoryFormatError, match=rf"^{re.escape(str(path))}:3: an operation longer than 100 characters"):
        list(iter_edn_events(path, form_chars_max=100))
    assert len(list(iter_edn_events(path, form_chars_max=1000))) == 2


@pytest.mark.parametrize(
    "text, line, phrase",
    [
        ("[{:type :invoke, :f :read, :process 0}]\n{:type :ok}\n", 2, "more after the history's vector"),
        ("[{:type :invoke, :f :read, :process 0}\n", 1, "ends inside the history's vector"),
        ("{:type :invoke, :f :read, :process 0}}\n", 1, "an unmatched '}'"),
        ('{:type :invoke, :f :read, :value "open\n', 1, "the text ends inside this form"),
        ("{:type :invoke, :f :read, :process 0}\n\xff\n", 2, "not UTF-8 text"),
        ('{:type :invoke, :f :read, :value #inst "not a date", :process 0}\n', 1, "not valid EDN"),
        ('{:type :invoke, :f :read, :value #uuid "x", :process 0}\n', 1, "not valid EDN"),
        # Found by fuzzing: edn_format raised AttributeError and TypeError here.
        ("{:type :invoke}\n#uuid/;\n", 2, "not valid EDN"),
        ("{:type :invoke}\n#inst,::a(\n", 2, "not valid EDN"),
    ],
)
def test_malformed_streams_are_named_by_line(tmp_path, text, line, phrase):
    path = tmp_path / "history.edn"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    with pytest.raises(HistoryFormatError) as raised:
        list(iter_edn_events(path))
    assert str(raised.value).startswith(f"{path}:{line}: ") and phrase in str(raised.value), str(raised.value)


_EDN_PIECES = st.sampled_from(
    ['{', '}', '[', ']', '(', ')', '#{', '#_', '#inst', '#uuid', '#jepsen.history.Op', '#my/tag', '"', '\\', ':type',
     ':invoke', ':f', ':process', ':value', ':index', ';', '^:m', '1', '-1.5', '1e999', '1M', '12N', '1/2', 'nil', 'true',
     '"x"', '"2020-13-45"', '\\newline', ' ', '\n', ',', '0x1F', '##Inf', '.5', ':a/b/c', '::a', '\x00', 'é']
)


def _assert_read_or_refused(path: Path) -> None:
    try:
        for _ in iter_edn_events(path):
            pass
    except HistoryFormatError as error:
        assert re.match(rf"{re.escape(str(path))}(:\d+|: operation \d+)?: ", str(error)), str(error)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_the_checkers_error(tmp_path, data):
    path = tmp_path / "fuzz.edn"
    path.write_bytes(data)
    _assert_read_or_refused(path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_EDN_PIECES, max_size=40).map("".join))
def test_random_edn_like_text_never_raises_anything_but_the_checkers_error(tmp_path, text):
    path = tmp_path / "fuzz.edn"
    path.write_text(text, encoding="utf-8")
    _assert_read_or_refused(path)
    # --initial-value's parser catches the same set, as ValueError.
    try:
        parse_value(text)
    except ValueError:
        pass
