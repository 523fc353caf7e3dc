"""Recovery at open: torn tails, bit flips, gaps and epoch regressions are
cut back to the last good batch, and nothing after damage is ever served."""

from __future__ import annotations

import logging
import shutil

import pytest
from _storage_helpers import all_entries, batch_spans, flip_bit, make_entries, open_log, segment_files

from quorum.storage import CorruptRecordError
from quorum.storage._format import encode_batch


def _build(directory, *, segment_bytes_max=64 * 1024 * 1024):
    """Five batches of 4 records in epochs 1,1,2,2,3; returns the entries."""
    entries = []
    log = open_log(directory, segment_bytes_max=segment_bytes_max)
    for batch, epoch in enumerate([1, 1, 2, 2, 3]):
        chunk = make_entries(batch * 4, 4, epoch=epoch, size=9)
        log.append(chunk)
        entries += chunk
    log.close()
    return entries


@pytest.fixture
def template(tmp_path_factory):
    directory = tmp_path_factory.mktemp("template")
    entries = _build(directory)
    segment = segment_files(directory)[0]
    return entries, segment.name, segment.read_bytes(), batch_spans(segment)


def _reopen_with(directory, name, data):
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir()
    (directory / name).write_bytes(data)
    return open_log(directory)


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path, template, caplog):
    entries, name, data, spans = template
    start, end = spans[-1]
    for cut in range(start, end):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
            log = _reopen_with(tmp_path / "d", name, data[:cut])
        assert all_entries(log) == entries[:16], cut
        assert (log.end_offset, log.last_epoch) == (16, 2)
        log.close()
        assert (tmp_path / "d" / name).stat().st_size == start
        if cut > start:
            assert "short write" in caplog.text and f"truncating at byte {start}" in caplog.text
            assert "offsets from 16 on are cut" in caplog.text
        else:
            assert caplog.text == ""


def test_bit_flip_anywhere_in_the_last_batch(tmp_path, template, caplog):
    entries, name, data, spans = template
    start, end = spans[-1]
    for position in range(start, end):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
                log = _reopen_with(tmp_path / "d", name, bytes(damaged))
            assert all_entries(log) == entries[:16], (position, bit)
            log.close()
            assert (tmp_path / "d" / name).stat().st_size == start
    assert "CRC mismatch" in caplog.text


def test_bit_flip_in_an_earlier_batch_cuts_everything_after_it(tmp_path, template):
    entries, name, data, spans = template
    start, end = spans[1]
    for position in range(start, end):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        log = _reopen_with(tmp_path / "d", name, bytes(damaged))
        # batches 3..5 are intact, but they follow the damage: never served
        assert all_entries(log) == entries[:4], position
        assert log.end_offset == 4
        log.append(make_entries(4, 1, epoch=9))  # and the log goes on from there
        log.close()


def test_damage_in_an_earlier_segment_removes_later_segments(tmp_path, caplog):
    entries = _build(tmp_path, segment_bytes_max=150)
    files = segment_files(tmp_path)
    assert len(files) >= 3
    first_spans = batch_spans(files[0])
    flip_bit(files[0], first_spans[-1][0] + 30)
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = open_log(tmp_path, segment_bytes_max=150)
    lost_from = int(files[0].stem) + 4 * (len(first_spans) - 1)
    assert all_entries(log) == entries[:lost_from]
    assert [f.name for f in segment_files(tmp_path)] == [files[0].name]
    for later in files[1:]:
        assert f"removing {later.name}" in caplog.text
    assert "follows the damaged batch" in caplog.text
    log.close()


def test_missing_middle_segment_is_a_gap(tmp_path, caplog):
    entries = _build(tmp_path, segment_bytes_max=150)
    files = segment_files(tmp_path)
    files[1].unlink()
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = open_log(tmp_path)
    assert all_entries(log) == entries[: int(files[1].stem)]
    assert "but the log before it ends at offset" in caplog.text
    assert [f.name for f in segment_files(tmp_path)] == [files[0].name]
    log.close()


@pytest.mark.parametrize("tail", [b"\0" * 4096, b"\0\0\0\x05garbage", b"\xff" * 40])
def test_garbage_after_the_last_batch(tmp_path, template, tail):
    entries, name, data, spans = template
    log = _reopen_with(tmp_path / "d", name, data + tail)
    assert all_entries(log) == entries
    log.close()
    assert (tmp_path / "d" / name).stat().st_size == len(data)


def test_offset_gap_inside_a_segment(tmp_path, template, caplog):
    entries, name, data, spans = template
    wrong = encode_batch(21, 3, make_entries(21, 2, epoch=3))  # should start at 20
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = _reopen_with(tmp_path / "d", name, data + wrong)
    assert all_entries(log) == entries
    assert "batch base offset 21 where offset 20 was expected" in caplog.text
    log.close()


def test_epoch_going_backwards(tmp_path, template, caplog):
    entries, name, data, spans = template
    regress = encode_batch(20, 2, make_entries(20, 2, epoch=2))  # after epoch 3
    with caplog.at_level(logging.WARNING, logger="pykraft.storage"):
        log = _reopen_with(tmp_path / "d", name, data + regress)
    assert all_entries(log) == entries
    assert "epoch 2 after epoch 3" in caplog.text
    log.close()


def test_read_never_returns_a_record_that_fails_its_crc(tmp_path, template):
    entries, name, data, spans = template
    log = _reopen_with(tmp_path / "d", name, data)
    # Damage appears after the log was opened (bit rot, a bad sector).
    segment = tmp_path / "d" / name
    start, end = spans[2]
    flip_bit(segment, start + 28)
    assert log.read(0, 40) == entries[:2]  # batches before the damage are fine
    for offset in range(8, 12):
        with pytest.raises(CorruptRecordError, match="CRC mismatch") as caught:
            log.read(offset)
        assert caught.value.position == start
    with pytest.raises(CorruptRecordError):
        log.read(0, 10**6)  # would reach the damaged batch: nothing partial either
    with pytest.raises(CorruptRecordError):
        list(log.entries_from())
    with pytest.raises(CorruptRecordError):
        log.read(12)  # located by scanning from the segment start, through the damage
    log.close()
    # At the next start, recovery cuts at the damage.
    with open_log(tmp_path / "d") as log:
        assert all_entries(log) == entries[:8]


def test_truncating_at_damaged_data_is_refused(tmp_path, template):
    entries, name, data, spans = template
    log = _reopen_with(tmp_path / "d", name, data)
    flip_bit(tmp_path / "d" / name, spans[2][0] + 30)
    with pytest.raises(CorruptRecordError):
        log.truncate_to(10)
    log.close()
