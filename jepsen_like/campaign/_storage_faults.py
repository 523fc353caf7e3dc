"""Storage faults on a campaign node's files (issue 14, part 5).

Every function here works on the data directory of a node the caller has
stopped with kill -9, and inflicts only a fault pykraft promises to survive
without losing anything acknowledged (docs/storage.md; the choice of
faults and what is left out is explained in docs/nemesis.md, "Storage
faults"). Each returns a JSON-ready description for the history: the
fault's kind, the file, the byte offset and what was done there.

``SmallDisk`` is a size-capped tmpfs mounted on a node's data directory
(root only), shrunk to fill it and grown again.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from quorum.storage import dump_log

ELECTION_STATE_FILE = "quorum-state.json"
ELECTION_WITNESS_FILE = "quorum-state.witness.json"
# The older copy of the election state ``save_election_state`` keeps.
SAVED_ELECTION_STATE = "quorum-state.json.saved"


class NothingToDamageError(Exception):
    """The data directory holds too little for the fault (no batch that a
    valid batch follows, no election state beside records): nothing was
    changed."""


def _relative(data_dir: Path, path: str | Path) -> str:
    return str(Path(path).relative_to(data_dir))


def _batches(data_dir: Path) -> list[dict[str, Any]]:
    return [item for item in dump_log(data_dir, records=False) if item["type"] == "batch"]


def flip_byte(data_dir: Path, rng: random.Random) -> dict[str, Any]:
    """Flip one bit in a batch that a valid batch follows: damage, not a
    torn tail (docs/storage.md, "Torn tail or damage"), so the node starts
    repairing (``--on-damage repair``) and votes again only once a leader
    gave it back what it held. The last batch of the log is never chosen: a
    flip there looks like a torn write and is cut, and that batch may have
    been acknowledged (the known limit in docs/storage.md). The flipped
    byte is in the batch's CRC or body, never its length field, so the
    damage is a CRC mismatch. Raises ``NothingToDamageError`` when the log
    holds fewer than two batches."""
    batches = _batches(data_dir)
    if len(batches) < 2:
        raise NothingToDamageError(f"{data_dir} holds {len(batches)} batch(es); a flip needs a valid batch after it")
    batch = rng.choice(batches[:-1])
    offset = batch["position"] + rng.randrange(4, batch["size_bytes"])
    bit = 1 << rng.randrange(8)
    with open(batch["file"], "r+b") as segment:
        segment.seek(offset)
        [before] = segment.read(1)
        segment.seek(offset)
        segment.write(bytes([before ^ bit]))
        segment.flush()
        os.fsync(segment.fileno())
    return {
        "kind": "flip-byte",
        "file": _relative(data_dir, batch["file"]),
        "offset": offset,
        "bit": bit,
        "batch_position": batch["position"],
        "batch_base_offset": batch["base_offset"],
        "batches_after": len(batches) - 1 - batches.index(batch),
    }


def torn_write(data_dir: Path, rng: random.Random) -> dict[str, Any]:
    """Append a strict prefix of the log's last batch to the end of the
    active segment: what a kill -9 or a power loss in the middle of an
    append leaves (the append never finished, so nothing of it was
    acknowledged). Recovery cuts it at the next start. Raises
    ``NothingToDamageError`` when the log holds no batch."""
    batches = _batches(data_dir)
    if not batches:
        raise NothingToDamageError(f"{data_dir} holds no batch to tear")
    last = batches[-1]
    path = Path(last["file"])
    with open(path, "rb") as segment:
        segment.seek(last["position"])
        whole = segment.read(last["size_bytes"])
    torn_bytes = rng.randrange(1, len(whole))
    with open(path, "ab") as segment:
        offset = segment.tell()
        segment.write(whole[:torn_bytes])
        segment.flush()
        os.fsync(segment.fileno())
    return {"kind": "torn-write", "file": _relative(data_dir, path), "offset": offset, "bytes": torn_bytes}


def lose_election_state(data_dir: Path, keep_dir: Path) -> dict[str, Any]:
    """Take ``quorum-state.json`` away (moved to ``keep_dir``, so that it
    can be put back): the node must refuse to start, since no local
    information bounds the epochs it voted in (docs/storage.md, "Election
    state lost beside a log"). Raises ``NothingToDamageError`` when there is
    no election state, or no record beside it (a node without records may
    start at epoch 0: taking its state away would not be a fault it must
    refuse)."""
    state = data_dir / ELECTION_STATE_FILE
    if not state.exists() or not _batches(data_dir):
        raise NothingToDamageError(f"{data_dir} holds no election state beside records")
    keep_dir.mkdir(parents=True, exist_ok=True)
    kept = keep_dir / f"{ELECTION_STATE_FILE}.{len(os.listdir(keep_dir))}"
    # (A move, not a rename: ``keep_dir`` may be on another filesystem than
    # a small disk's data directory.)
    shutil.move(state, kept)
    return {"kind": "election-state-lost", "file": ELECTION_STATE_FILE, "offset": 0, "kept_as": str(kept)}


def restore_election_state(data_dir: Path, kept: str) -> None:
    """Put back the very file ``lose_election_state`` took (the node was
    stopped all along, so it is the current one, not a rolled-back copy)."""
    shutil.move(kept, data_dir / ELECTION_STATE_FILE)


def save_election_state(data_dir: Path, keep_dir: Path) -> bool:
    """Copy the node's ``quorum-state.json`` into ``keep_dir`` now, while
    the node runs (the file is only ever replaced whole, by a rename, so a
    read sees one version): the older valid copy that
    ``roll_back_election_state`` restores later. False when there is none
    yet, or a copy is already kept."""
    kept = keep_dir / SAVED_ELECTION_STATE
    if kept.exists():
        return False
    try:
        raw = (data_dir / ELECTION_STATE_FILE).read_bytes()
    except FileNotFoundError:
        return False
    keep_dir.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(raw)
    return True


def _generation(raw: bytes) -> int:
    """The generation a copy of the election state claims (0 for a file
    written before generations existed)."""
    generation = json.loads(raw).get("generation", 0)
    return generation if isinstance(generation, int) else 0


def kept_election_state_is_older(data_dir: Path, keep_dir: Path) -> bool:
    """Whether the copy ``save_election_state`` kept is older than the
    node's current election state (an election happened since)."""
    try:
        older = (keep_dir / SAVED_ELECTION_STATE).read_bytes()
        current = (data_dir / ELECTION_STATE_FILE).read_bytes()
    except FileNotFoundError:
        return False
    return _generation(older) < _generation(current)


def roll_back_election_state(data_dir: Path, keep_dir: Path, rng: random.Random) -> dict[str, Any]:
    """Put the copy ``save_election_state`` kept over the primary or the
    witness (drawn) of the stopped node: a restored backup, a file system
    that lost its last renames. The next start must take the newer copy and
    say so in one line (docs/storage.md, "Election state rolled back"): it
    remembers every vote it cast. The kept copy is used up. Raises
    ``NothingToDamageError`` when no copy is kept or the kept one is not
    older than the node's (no election since it was saved)."""
    kept = keep_dir / SAVED_ELECTION_STATE
    if not kept.exists():
        raise NothingToDamageError(f"no older election state of {data_dir} is kept")
    older = kept.read_bytes()
    current = (data_dir / ELECTION_STATE_FILE).read_bytes()
    if _generation(older) >= _generation(current):
        kept.unlink()
        raise NothingToDamageError(f"the kept election state of {data_dir} is not older than the node's (no election since)")
    target = rng.choice((ELECTION_STATE_FILE, ELECTION_WITNESS_FILE))
    (data_dir / target).write_bytes(older)
    with open(data_dir / target, "rb") as restored:
        os.fsync(restored.fileno())
    kept.unlink()
    return {
        "kind": "election-state-rollback",
        "file": target,
        "offset": 0,
        "generation": _generation(current),
        "rolled_back_to": _generation(older),
    }


# =========================================================================
# A small disk
# =========================================================================


def small_disk_unavailable() -> str | None:
    """Why a tmpfs cannot be mounted here (None: it can)."""
    if os.geteuid() != 0:
        return "mounting a size-capped tmpfs needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    return None


class SmallDisk:
    """A tmpfs of ``size_bytes`` mounted on ``path`` (created if missing;
    must be empty). ``fill()`` shrinks it to what is used plus
    ``slack_bytes``, so the next writes fail with ENOSPC; ``grow()`` gives
    the full size back. ``close()`` copies what it holds back into the
    plain directory beneath, so the run directory keeps the node's files.
    Raises ``subprocess.CalledProcessError`` when a mount command fails."""

    def __init__(self, path: Path, size_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = path
        self.size_bytes = size_bytes
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise ValueError(f"{path} is not empty; a small disk is mounted before the node first starts")
        self._mount("-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs")
        self.mounted = True

    def _mount(self, *arguments: str) -> None:
        subprocess.run(["mount", *arguments, str(self.path)], check=True, capture_output=True)

    def used_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def fill(self, slack_bytes: int = 16 * 1024) -> int:
        """Shrink to the bytes used now plus ``slack_bytes`` (whole pages);
        returns the new size."""
        page = os.sysconf("SC_PAGE_SIZE")
        size = -(-(self.used_bytes() + slack_bytes) // page) * page
        self._mount("-o", f"remount,size={size}")
        return size

    def grow(self) -> None:
        self._mount("-o", f"remount,size={self.size_bytes}")

    def close(self) -> None:
        if not self.mounted:
            return
        saved = self.path.with_name(self.path.name + ".tmpfs-copy")
        shutil.copytree(self.path, saved, symlinks=True)
        subprocess.run(["umount", str(self.path)], check=True, capture_output=True)
        self.mounted = False
        self.path.rmdir()
        os.replace(saved, self.path)
