"""dump-log: decodes segments and snapshots, flags damage, modifies nothing."""

from __future__ import annotations

import json

import msgpack
from _storage_helpers import batch_spans, flip_bit, make_entries, segment_files
from click.testing import CliRunner

from quorum._types import ElectionState, Entry, RecordKind, SnapshotId
from quorum.storage import FileStorage, dump_log, dump_log_command, main


def _data_dir(tmp_path):
    with FileStorage.open(tmp_path, node_id=1, cluster_id="c", fsync=False, segment_bytes_max=300) as storage:
        storage.write_election_state(ElectionState(2, voted_for=1))
        storage.append([Entry(0, 1, RecordKind.DATA, msgpack.packb({"topic": "t", "partitions": 3}))])
        for start in range(1, 30, 3):
            storage.append(make_entries(start, 3, epoch=2))
        storage.write_snapshot(SnapshotId(10, 2), b"snapshot")
        storage.flush()
    return tmp_path


def _snapshot_of_files(directory):
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_clean_directory(tmp_path):
    directory = _data_dir(tmp_path)
    items = list(dump_log(directory))
    kinds = {item["type"] for item in items}
    assert {"meta", "election_state", "segment", "batch", "index", "snapshot", "summary"} <= kinds
    summary = items[-1]
    assert summary["problems"] == 0 and summary["records"] == 31 and summary["valid_end_offset"] == 31
    first = next(item for item in items if item["type"] == "batch")
    assert first["records"][0]["msgpack"] == "{'topic': 't', 'partitions': 3}"
    assert main([str(directory)]) == 0


def test_bad_crc_is_flagged_and_nothing_is_modified(tmp_path):
    directory = _data_dir(tmp_path)
    segment = segment_files(directory / "log")[1]
    start, _ = batch_spans(segment)[0]
    flip_bit(segment, start + 27)
    (segment.with_suffix(".index")).unlink()
    before = _snapshot_of_files(directory)
    items = list(dump_log(directory))
    assert _snapshot_of_files(directory) == before  # read-only, unlike recovery
    bad = [item for item in items if item["type"] == "bad_batch"]
    assert len(bad) == 1 and "CRC mismatch" in bad[0]["reason"] and bad[0]["position"] == start
    assert items[-1]["problems"] >= 1
    assert items[-1]["valid_end_offset"] is None or items[-1]["valid_end_offset"] <= int(segment.stem)
    # dumping carries on past the damage: later batches are still shown
    assert any(item["type"] == "batch" and item["file"] == str(segment) for item in items)
    assert main([str(directory)]) == 1


def test_text_and_json_output(tmp_path):
    directory = _data_dir(tmp_path)
    flip_bit(directory / "snapshots" / "00000000000000000010-0000000002.snapshot", 40)
    runner = CliRunner()
    result = runner.invoke(dump_log_command, [str(directory)])
    assert result.exit_code == 1
    assert "batch @0: offsets 0..0, epoch 1" in result.output
    assert "BAD: payload CRC mismatch" in result.output
    assert result.output.strip().splitlines()[-1].startswith("summary:")
    result = runner.invoke(dump_log_command, [str(directory), "--json", "--no-records"])
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines[-1]["type"] == "summary" and lines[-1]["problems"] == 1
    assert all("records" not in line for line in lines if line["type"] == "batch")


def test_torn_tail_in_a_bare_log_directory(tmp_path):
    directory = _data_dir(tmp_path)
    segment = segment_files(directory / "log")[-1]
    segment.write_bytes(segment.read_bytes()[:-3])
    items = list(dump_log(directory / "log"))
    bad = [item for item in items if item["type"] == "bad_batch"]
    assert bad and bad[0]["problem"] == "torn" and "short write" in bad[0]["reason"]


def test_usage_errors(tmp_path):
    assert main([str(tmp_path / "missing")]) == 2
