"""Recovery at open: a torn tail (a bad batch at the end of the active
segment with nothing valid after it) is cut back to the last good batch;
anything else is damage, refused with ``DamagedLogError`` before a single
byte is modified (docs/storage.md, "Torn tail or damage")."""

from __future__ import annotations

import logging
import shutil

import pytest
from _storage_helpers import all_entries, batch_spans, flip_bit, make_entries, open_log, segment_files

from quorum.storage import CorruptRecordError, DamagedLogError
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


def test_bit_flip_anywhere_in_the_last_batch(tmp_path, template):
    """Issue 14's known limit, closed: a flipped bit in the last batch,
    which may have been fsynced and acknowledged, is damage, not a torn
    write, because the batch is whole and none of its sectors reads as
    zeros (etcd's WAL makes the same distinction). The one exception is a
    flip in the length field that makes the batch claim more bytes than the
    file holds: that is what a short write looks like, and it is cut."""
    entries, name, data, spans = template
    start, end = spans[-1]
    cut_as_torn = []
    for position in range(start, end):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            directory = tmp_path / "d"
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir()
            (directory / name).write_bytes(bytes(damaged))
            length = int.from_bytes(damaged[start : start + 4], "big")
            if start + 4 + length > len(damaged):
                log = open_log(directory)
                assert all_entries(log) == entries[:16] and log.recovery.torn, (position, bit)
                log.close()
                cut_as_torn.append((position, bit))
                continue
            error = _refused(directory)
            assert error.position == start and "last batch" in error.what, (position, bit, error.what)
    assert all(position < start + 4 for position, _ in cut_as_torn)
    assert len(cut_as_torn) < 32


def test_a_torn_append_that_left_a_zeroed_sector_is_cut(tmp_path):
    """A crash that grew the file but did not write every sector of the
    last batch leaves whole sectors of zeros (unwritten extents): a torn
    write, cut, although the file holds every byte the batch claims."""
    directory = tmp_path / "t"
    log = open_log(directory)
    log.append(make_entries(0, 4, epoch=1, size=9))
    log.append(make_entries(4, 4, epoch=1, size=400))  # spans several sectors
    log.close()
    segment = segment_files(directory)[0]
    data = bytearray(segment.read_bytes())
    start, end = batch_spans(segment)[-1]
    assert end - start > 1024
    sector = (start // 512 + 1) * 512
    data[sector : sector + 512] = bytes(512)
    segment.write_bytes(bytes(data))
    log = open_log(directory)
    assert log.end_offset == 4 and log.recovery.torn and log.recovery.position == start
    log.close()
    # The same batch with one flipped bit instead of the zeroed sector: damage.
    data = bytearray(segment.read_bytes())  # cut back to `start`
    whole = bytearray(encode_batch(4, 1, make_entries(4, 4, epoch=1, size=400)))
    whole[sector - start + 7] ^= 0x10
    segment.write_bytes(bytes(data) + bytes(whole))
    error = _refused(directory)
    assert "no zeroed 512-byte sector: a flipped bit, not a torn write" in error.what


def _refused(directory, **options):
    """Open must refuse with DamagedLogError and leave every file as it was."""
    before = {path.name: path.read_bytes() for path in sorted(directory.iterdir())}
    with pytest.raises(DamagedLogError) as caught:
        open_log(directory, **options)
    after = {path.name: path.read_bytes() for path in sorted(directory.iterdir())}
    assert after == before
    return caught.value


def test_bit_flip_in_an_earlier_batch_is_damage_not_a_torn_tail(tmp_path, template):
    # Issue 14: a flipped byte mid-log used to be cut like a torn tail,
    # dropping every acknowledged record after it.
    entries, name, data, spans = template
    start, end = spans[1]
    for position in range(start, end):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        directory = tmp_path / f"d{position}"
        directory.mkdir()
        (directory / name).write_bytes(bytes(damaged))
        error = _refused(directory)
        assert (error.path, error.position) == (str(directory / name), start), position
        assert "followed by a valid batch" in error.what
        assert str(error).count(". ") == 0 and str(error).endswith("describes.")


def test_damage_in_a_sealed_segment_is_refused(tmp_path):
    entries = _build(tmp_path, segment_bytes_max=150)
    files = segment_files(tmp_path)
    assert len(files) >= 3
    flip_bit(files[0], batch_spans(files[0])[-1][0] + 30)
    error = _refused(tmp_path, segment_bytes_max=150)
    assert error.path == str(files[0]) and "in a sealed segment" in error.what


def test_torn_last_batch_of_a_sealed_segment_is_damage(tmp_path):
    _build(tmp_path, segment_bytes_max=150)
    files = segment_files(tmp_path)
    sealed = files[-2]
    sealed.write_bytes(sealed.read_bytes()[:-3])  # segments are fsynced before the next exists
    error = _refused(tmp_path, segment_bytes_max=150)
    assert error.path == str(sealed) and "short write" in error.what


def test_missing_middle_segment_is_damage(tmp_path):
    _build(tmp_path, segment_bytes_max=150)
    files = segment_files(tmp_path)
    files[1].unlink()
    error = _refused(tmp_path)
    assert error.path == str(files[2]) and error.position == 0
    assert f"the segment before it ends at offset {int(files[1].stem)}" in error.what


def test_missing_first_segment_after_a_deletion_is_damage(tmp_path):
    log = open_log(tmp_path, segment_bytes_max=150)
    for base in range(0, 20, 4):
        log.append(make_entries(base, 4, epoch=1, size=9))
    log.delete_before(5)
    start = log.log_start_offset
    assert 0 < start < 20 and len(segment_files(tmp_path)) >= 2
    log.close()
    (tmp_path / f"{start:020d}.log").unlink()
    error = _refused(tmp_path)
    assert f"checkpoint says offset {start}" in error.what


@pytest.mark.parametrize("tail", [b"\0" * 4096, b"\0" * 3, b"\xff" * 40])
def test_a_torn_tail_after_the_last_batch(tmp_path, template, tail):
    """Zeros (sectors never written), or a length claiming more than the
    file holds (a short write): torn, cut."""
    entries, name, data, spans = template
    log = _reopen_with(tmp_path / "d", name, data + tail)
    assert all_entries(log) == entries
    assert log.recovery.torn and log.recovery.position == len(data) and log.recovery.end_offset == 20
    log.close()
    assert (tmp_path / "d" / name).stat().st_size == len(data)


def test_whole_garbage_after_the_last_batch_is_damage(tmp_path, template):
    """Bytes no torn append leaves (no zeroed sector, not short): damage."""
    entries, name, data, spans = template
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / name).write_bytes(data + b"\0\0\0\x05garbage")
    error = _refused(directory)
    assert error.position == len(data) and "implausible batch length 5" in error.what


def test_a_sound_log_says_so(tmp_path, template):
    entries, name, data, spans = template
    with _reopen_with(tmp_path / "d", name, data) as log:
        assert not log.recovery.torn and log.recovery.end_offset == 20
        assert log.recovery.describe() == "sound: the log ends at offset 20"


def test_crc_valid_batch_with_the_wrong_offset_is_damage(tmp_path, template):
    entries, name, data, spans = template
    wrong = encode_batch(21, 3, make_entries(21, 2, epoch=3))  # should start at 20
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / name).write_bytes(data + wrong)
    error = _refused(directory)
    assert "batch base offset 21 where offset 20 was expected" in error.what and "CRC holds" in error.what


def test_epoch_going_backwards_is_damage(tmp_path, template):
    entries, name, data, spans = template
    regress = encode_batch(20, 2, make_entries(20, 2, epoch=2))  # after epoch 3
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / name).write_bytes(data + regress)
    assert "epoch 2 after epoch 3" in _refused(directory).what


def test_torn_tail_after_a_zeroed_unsynced_region(tmp_path, template):
    # What a power loss leaves when the file size reached the disk but the
    # data did not: zeros to the end. Nothing valid follows: a torn tail.
    entries, name, data, spans = template
    start, end = spans[-1]
    damaged = data[:start] + b"\0" * (end - start)
    with _reopen_with(tmp_path / "d", name, damaged) as log:
        assert all_entries(log) == entries[:16] and log.recovery.torn


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
    # At the next start, recovery refuses: valid batches follow the damage.
    with pytest.raises(DamagedLogError) as caught:
        open_log(tmp_path / "d")
    assert caught.value.position == start


def test_truncating_at_damaged_data_is_refused(tmp_path, template):
    entries, name, data, spans = template
    log = _reopen_with(tmp_path / "d", name, data)
    flip_bit(tmp_path / "d" / name, spans[2][0] + 30)
    with pytest.raises(CorruptRecordError):
        log.truncate_to(10)
    log.close()
