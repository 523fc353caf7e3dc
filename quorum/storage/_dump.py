"""``kraft-quorum dump-log DIR``: decode a node's log and snapshots.

Read-only, unlike recovery: nothing is truncated, rebuilt or removed, so
the damage stays in place for inspection. Every batch is CRC-checked and a
bad one is flagged with the reason; after a bad batch whose length field
still looks plausible the dump carries on, so that an operator sees what
follows. Whether recovery would cut a bad batch as a torn tail or refuse it
as damage is ``check-storage``'s verdict, not this dump's.

``DIR`` may be a data directory (with ``log/`` and ``snapshots/``), or a
directory holding segment and/or snapshot files directly.

Exit status: 0 when everything checked out, 1 when anything was flagged,
2 on a usage error.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click
import msgpack

from ._election import ELECTION_STATE_FILE_NAME, ELECTION_WITNESS_FILE_NAME, decode_election_copy
from ._errors import CorruptElectionStateError
from ._files import decode_checked_json
from ._format import (
    BATCH_HEADER_BYTES,
    MIN_BATCH_LENGTH,
    BatchProblem,
    decode_records,
    decode_snapshot,
    is_decimal,
    parse_batch,
    parse_snapshot_file_name,
)
from ._segments import CHECKPOINT_FILE_NAME, INDEX_SUFFIX, LOG_SUFFIX, REWRITE_SUFFIX
from ._snapshots import PART_SUFFIX
from ._storage import LOG_DIR_NAME, META_FILE_NAME, SNAPSHOT_DIR_NAME

_INDEX_ENTRY = struct.Struct(">QQ")
_PREVIEW_BYTES = 48
_INDEX_INTERVAL_BYTES = 4096

# Record types that mean "something is wrong here".
PROBLEM_TYPES = frozenset({"bad_batch", "inconsistency", "error"})


def dump_log(directory: Path | str, *, records: bool = True) -> Iterator[dict[str, Any]]:
    """Decode everything under ``directory`` as a stream of dicts, each with
    a ``type``: ``meta``, ``election_state``, ``log_start_offset``,
    ``segment``, ``batch`` (with its ``records`` unless ``records=False``),
    ``bad_batch``, ``inconsistency``, ``index``, ``pending_rewrite``,
    ``snapshot``, ``partial_snapshot``, ``error``, and a final ``summary``.
    Problems are the types in ``PROBLEM_TYPES`` and ``snapshot`` records with
    ``crc_ok`` false. Never modifies anything. Raises ``FileNotFoundError``
    if ``directory`` does not exist."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    summary = {
        "type": "summary",
        "segments": 0,
        "batches": 0,
        "records": 0,
        "bad_batches": 0,
        "problems": 0,
        "snapshots": 0,
        "log_start_offset": None,
        "valid_end_offset": None,
    }
    is_data_dir = (root / LOG_DIR_NAME).is_dir() or (root / SNAPSHOT_DIR_NAME).is_dir()
    log_dir = root / LOG_DIR_NAME if is_data_dir else root
    snapshot_dir = root / SNAPSHOT_DIR_NAME if is_data_dir else root

    def count(item: dict[str, Any]) -> dict[str, Any]:
        if item["type"] in PROBLEM_TYPES or (item["type"] == "snapshot" and not item["crc_ok"]):
            summary["problems"] += 1
        return item

    if is_data_dir:
        for item in _dump_small_files(root):
            yield count(item)
    if log_dir.is_dir():
        for item in _dump_segments(log_dir, summary, records):
            yield count(item)
    if snapshot_dir.is_dir():
        for item in _dump_snapshots(snapshot_dir, summary):
            yield count(item)
    yield summary


def _dump_small_files(root: Path) -> Iterator[dict[str, Any]]:
    meta = root / META_FILE_NAME
    if meta.exists():
        try:
            document = decode_checked_json(meta.read_bytes())
            yield {"type": "meta", "file": str(meta), "node_id": document.get("node_id"),
                   "cluster_id": document.get("cluster_id"), "directory_id": document.get("directory_id")}
        except ValueError as error:
            yield {"type": "error", "file": str(meta), "reason": f"damaged: {error}"}
    for state in (root / ELECTION_STATE_FILE_NAME, root / ELECTION_WITNESS_FILE_NAME):
        if not state.exists():
            continue
        try:
            copy = decode_election_copy(state.read_bytes(), state)
            decoded = copy.state
            yield {"type": "election_state", "file": str(state), "generation": copy.generation, "epoch": decoded.epoch,
                   "voted_for": decoded.voted_for, "leader_id": decoded.leader_id}
        except CorruptElectionStateError as error:
            yield {"type": "error", "file": str(state), "reason": str(error)}


def _dump_segments(log_dir: Path, summary: dict[str, Any], records: bool) -> Iterator[dict[str, Any]]:
    checkpoint = log_dir / CHECKPOINT_FILE_NAME
    if checkpoint.exists():
        try:
            document = decode_checked_json(checkpoint.read_bytes())
            yield {"type": "log_start_offset", "file": str(checkpoint),
                   "log_start_offset": document.get("log_start_offset")}
        except ValueError as error:
            yield {"type": "error", "file": str(checkpoint), "reason": f"damaged: {error}"}
    names = sorted(os.listdir(log_dir))
    for name in names:
        if name.endswith(REWRITE_SUFFIX):
            yield {"type": "pending_rewrite", "file": str(log_dir / name),
                   "note": "an interrupted mid-batch truncation; the next open replays or discards it"}
    bases = sorted(
        int(name[: -len(LOG_SUFFIX)])
        for name in names
        if name.endswith(LOG_SUFFIX) and len(name) == 20 + len(LOG_SUFFIX) and is_decimal(name[:20])
    )
    expected: int | None = None  # next offset of the gap-free prefix, None once broken
    epoch_floor = 0
    healthy = True
    for base in bases:
        path = log_dir / f"{base:020d}{LOG_SUFFIX}"
        data = path.read_bytes()
        summary["segments"] += 1
        if summary["log_start_offset"] is None:
            summary["log_start_offset"] = base
            expected = base
        yield {"type": "segment", "file": str(path), "base_offset": base, "size_bytes": len(data)}
        if healthy and expected != base:
            healthy = False
            yield {"type": "inconsistency", "file": str(path),
                   "reason": f"segment starts at offset {base} but the log before it ends at offset {expected}"}
        position = 0
        next_offset = base
        batch_positions: list[tuple[int, int]] = []
        while position < len(data):
            try:
                header = parse_batch(data, position, len(data))
                decode_records(data, position, header, build=False)
            except BatchProblem as problem:
                summary["bad_batches"] += 1
                healthy = False
                item: dict[str, Any] = {"type": "bad_batch", "file": str(path), "position": position,
                                        "problem": problem.kind, "reason": problem.reason, "crc_ok": False}
                item.update(_claimed(data, position))
                yield item
                (length,) = struct.unpack_from(">I", data, position) if len(data) - position >= 4 else (0,)
                if length >= MIN_BATCH_LENGTH and position + 4 + length <= len(data):
                    position += 4 + length
                    continue
                yield {"type": "error", "file": str(path), "position": position,
                       "reason": f"the rest of the file ({len(data) - position} bytes) cannot be framed"}
                break
            batch_positions.append((header.base_offset, position))
            if header.base_offset != next_offset or header.epoch < epoch_floor:
                if healthy:
                    reason = (f"batch base offset {header.base_offset} where {next_offset} was expected"
                              if header.base_offset != next_offset
                              else f"epoch {header.epoch} after epoch {epoch_floor}")
                    yield {"type": "inconsistency", "file": str(path), "position": position, "reason": reason}
                healthy = False
            summary["batches"] += 1
            summary["records"] += header.count
            item = {"type": "batch", "file": str(path), "position": position, "size_bytes": header.size,
                    "base_offset": header.base_offset, "epoch": header.epoch, "record_count": header.count,
                    "crc_ok": True}
            if records:
                item["records"] = [_describe(entry) for entry in decode_records(data, position, header)]
            yield item
            next_offset = header.next_offset
            epoch_floor = max(epoch_floor, header.epoch)
            if healthy:
                expected = next_offset
            position += header.size
        if healthy:
            summary["valid_end_offset"] = expected
        yield from _check_index(path, base, batch_positions)


def _check_index(segment_path: Path, base: int, batches: list[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    index_path = segment_path.with_suffix(INDEX_SUFFIX)
    if not index_path.exists():
        yield {"type": "index", "file": str(index_path), "entries": 0, "consistent": False,
               "note": "missing (rebuilt at the next open)"}
        return
    raw = index_path.read_bytes()
    usable = len(raw) - len(raw) % _INDEX_ENTRY.size
    entries = [_INDEX_ENTRY.unpack_from(raw, i) for i in range(0, usable, _INDEX_ENTRY.size)]
    known = set(batches)
    consistent = len(raw) % _INDEX_ENTRY.size == 0 and all(entry in known for entry in entries)
    item = {"type": "index", "file": str(index_path), "entries": len(entries), "consistent": consistent}
    if not consistent:
        item["note"] = "does not match the batches (rebuilt at the next open; the log is the truth)"
    yield item


def _dump_snapshots(snapshot_dir: Path, summary: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for name in sorted(os.listdir(snapshot_dir)):
        path = snapshot_dir / name
        if name.endswith(PART_SUFFIX):
            yield {"type": "partial_snapshot", "file": str(path), "size_bytes": path.stat().st_size,
                   "note": "unfinished; removed at the next open"}
            continue
        snapshot_id = parse_snapshot_file_name(name)
        if snapshot_id is None:
            continue
        summary["snapshots"] += 1
        raw = path.read_bytes()
        item: dict[str, Any] = {"type": "snapshot", "file": str(path), "end_offset": snapshot_id.end_offset,
                                "epoch": snapshot_id.epoch, "size_bytes": len(raw)}
        try:
            found, payload = decode_snapshot(raw)
            if found != snapshot_id:
                raise ValueError(f"the header says {found}, the file name {snapshot_id}")
            item.update(crc_ok=True, payload_bytes=len(payload))
        except ValueError as error:
            item.update(crc_ok=False, reason=str(error))
        yield item


def _claimed(data: bytes, position: int) -> dict[str, Any]:
    if len(data) - position < BATCH_HEADER_BYTES:
        return {}
    _, _, _, base_offset, epoch, count = struct.unpack_from(">IIBQII", data, position)
    return {"claimed_base_offset": base_offset, "claimed_epoch": epoch, "claimed_record_count": count}


def _describe(entry: Any) -> dict[str, Any]:
    data: bytes = entry.data
    item: dict[str, Any] = {"offset": entry.offset, "kind": entry.kind.name, "data_bytes": len(data)}
    try:
        decoded = msgpack.unpackb(data, raw=False, strict_map_key=False)
        text = repr(decoded)
        item["msgpack"] = text if len(text) <= 200 else text[:197] + "..."
    except Exception:  # noqa: BLE001 - opaque payloads are fine; show hex instead
        item["hex"] = data[:_PREVIEW_BYTES].hex() + ("..." if len(data) > _PREVIEW_BYTES else "")
    return item


def format_item(item: dict[str, Any]) -> list[str]:
    """Human-readable lines for one ``dump_log`` item."""
    kind = item["type"]
    file_name = Path(item["file"]).name if "file" in item else ""
    if kind == "segment":
        return [f"segment {file_name}: base offset {item['base_offset']}, {item['size_bytes']} bytes"]
    if kind == "batch":
        last = item["base_offset"] + item["record_count"] - 1
        lines = [f"  batch @{item['position']}: offsets {item['base_offset']}..{last}, epoch {item['epoch']}, "
                 f"{item['record_count']} record(s), {item['size_bytes']} bytes, crc ok"]
        for record in item.get("records", []):
            shown = record.get("msgpack") or record.get("hex", "")
            lines.append(f"    {record['offset']} {record['kind']} {record['data_bytes']}B {shown}")
        return lines
    if kind == "bad_batch":
        claim = ""
        if "claimed_base_offset" in item:
            claim = (f" (header claims base offset {item['claimed_base_offset']}, epoch {item['claimed_epoch']}, "
                     f"{item['claimed_record_count']} record(s))")
        return [f"  BAD BATCH @{item['position']} in {file_name}: {item['problem']}: {item['reason']}{claim}"
                " -- a torn tail if nothing valid follows at the end of the last segment, else damage"]
    if kind == "inconsistency":
        where = f" @{item['position']}" if "position" in item else ""
        return [f"  INCONSISTENT{where} in {file_name}: {item['reason']} -- damage: the node refuses to start"]
    if kind == "error":
        where = f" @{item['position']}" if "position" in item else ""
        return [f"ERROR {file_name}{where}: {item['reason']}"]
    if kind == "index":
        state = "consistent" if item["consistent"] else f"INCONSISTENT: {item.get('note', '')}"
        return [f"  index {file_name}: {item['entries']} entries, {state}"]
    if kind == "snapshot":
        state = "crc ok" if item["crc_ok"] else f"BAD: {item['reason']}"
        return [f"snapshot {file_name}: end offset {item['end_offset']}, epoch {item['epoch']}, "
                f"{item['size_bytes']} bytes, {state}"]
    if kind == "summary":
        return [f"summary: {item['segments']} segment(s), {item['batches']} batch(es), {item['records']} record(s), "
                f"{item['bad_batches']} bad batch(es), {item['snapshots']} snapshot(s), {item['problems']} problem(s); "
                f"log start {item['log_start_offset']}, valid end {item['valid_end_offset']}"]
    rest = ", ".join(f"{k}={v}" for k, v in item.items() if k not in ("type", "file"))
    return [f"{kind} {file_name}: {rest}"]


@click.command("dump-log")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of text.")
@click.option("--records/--no-records", default=True, show_default=True, help="Show every record of every batch.")
def dump_log_command(directory: Path, as_json: bool, records: bool) -> None:
    """Decode the log segments and snapshots in DIRECTORY, flagging bad CRCs.

    Read-only. Exit status 1 if anything is damaged or inconsistent.
    """
    problems = 0
    for item in dump_log(directory, records=records):
        if item["type"] == "summary":
            problems = item["problems"]
        if as_json:
            click.echo(json.dumps(item, sort_keys=True))
        else:
            for line in format_item(item):
                click.echo(line)
    if problems:
        raise click.exceptions.Exit(1)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dump-log`` with ``argv`` (without the program name); returns the
    exit status."""
    try:
        status = dump_log_command.main(
            args=list(argv) if argv is not None else None, prog_name="kraft-quorum dump-log", standalone_mode=False
        )
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.exceptions.Abort:
        return 1
    return status if isinstance(status, int) else 0
