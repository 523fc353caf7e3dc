"""Snapshot files (KIP-630).

A snapshot covers every record below ``end_offset``; ``epoch`` is the epoch
of the last record it covers. Files are named
``<end_offset:020>-<epoch:010>.snapshot`` and hold a 33-byte header (magic,
version, id, payload size and CRC, header CRC; see ``_format``) then the
state machine's opaque payload.

Publishing is atomic: write ``<name>.part``, fsync, rename to ``<name>``,
fsync the directory. A ``.part`` file left by a crash was never published,
so it is removed when the store is opened.

FetchSnapshot moves the *file* bytes (header included) in chunks:
``read_chunk``/``size`` on the sending side, a ``SnapshotWriter`` on the
receiving side, whose ``finish`` checks both CRCs before it publishes. A
sender verifies a snapshot's CRC before serving its first chunk, so a
damaged snapshot is never sent.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .._types import SnapshotId
from ._errors import REPAIR_ADVICE, CorruptSnapshotError, SnapshotNotFoundError
from ._files import data_sync, fsync_directory, write_all
from ._format import (
    SNAPSHOT_HEADER_BYTES,
    decode_snapshot,
    encode_snapshot_header,
    parse_snapshot_file_name,
    parse_snapshot_header,
    snapshot_file_name,
)

PART_SUFFIX = ".part"

_default_logger = logging.getLogger("pykraft.storage")


def _sort_key(snapshot_id: SnapshotId) -> tuple[int, int]:
    return (snapshot_id.end_offset, snapshot_id.epoch)


class SnapshotStore:
    """The snapshots of one node, in ``directory``."""

    def __init__(self, directory: Path | str, *, fsync: bool = True, logger: logging.Logger | None = None) -> None:
        """Creates ``directory`` if needed; removes leftover ``.part`` files
        (with a WARNING) and ignores unexpected names. Raises ``OSError``."""
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._logger = logger or _default_logger
        self._verified: set[SnapshotId] = set()
        self._writers: dict[SnapshotId, SnapshotWriter] = {}
        removed = False
        for name in sorted(os.listdir(self._directory)):
            if name.endswith(PART_SUFFIX):
                path = self._directory / name
                self._logger.warning(
                    "%s: removing an unfinished snapshot (%d bytes) left by an interrupted write or transfer",
                    path,
                    path.stat().st_size,
                )
                os.unlink(path)
                removed = True
            elif parse_snapshot_file_name(name) is None:
                self._logger.warning("%s: ignoring unexpected file %s", self._directory, name)
        if removed and self._fsync:
            fsync_directory(self._directory)

    @property
    def directory(self) -> Path:
        return self._directory

    def path_of(self, snapshot_id: SnapshotId) -> Path:
        return self._directory / snapshot_file_name(snapshot_id)

    def list(self) -> list[SnapshotId]:
        """Every published snapshot, oldest first (by end offset, then epoch).
        Raises ``OSError``."""
        ids = [i for i in map(parse_snapshot_file_name, os.listdir(self._directory)) if i is not None]
        return sorted(ids, key=_sort_key)

    def latest(self) -> SnapshotId | None:
        """The snapshot with the highest end offset, or None."""
        ids = self.list()
        return ids[-1] if ids else None

    def write(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Publish ``data`` as snapshot ``snapshot_id`` atomically and
        durably (``.part``, fsync, rename, fsync directory). Replaces a
        snapshot with the same id. Raises ``OSError``, ``ValueError`` on a
        negative id."""
        _check_id(snapshot_id)
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:  # it would share the .part file
            previous.abort()
        writer = SnapshotWriter(self, snapshot_id)
        try:
            header = encode_snapshot_header(snapshot_id, data)
            writer.append(0, header + data)
            writer.finish(_trusted=True)
        except BaseException:
            writer.abort()
            raise

    def read(self, snapshot_id: SnapshotId) -> bytes:
        """The payload of a snapshot, CRC-checked.

        Raises ``SnapshotNotFoundError``, ``CorruptSnapshotError``,
        ``OSError``.
        """
        path = self.path_of(snapshot_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id} in {self._directory}") from None
        try:
            found, payload = decode_snapshot(raw)
            if found != snapshot_id:
                raise ValueError(f"the header says {found}")
        except ValueError as error:
            where = f"the snapshot file {path} is damaged ({error})"
            raise CorruptSnapshotError(f"{where}: {REPAIR_ADVICE}.", where=where) from None
        self._verified.add(snapshot_id)
        return payload

    def size(self, snapshot_id: SnapshotId) -> int:
        """Size in bytes of the snapshot *file* (header included): the total
        a FetchSnapshot transfer moves. Raises ``SnapshotNotFoundError``."""
        try:
            return self.path_of(snapshot_id).stat().st_size
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id} in {self._directory}") from None

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of the snapshot file from byte ``position``
        (``b""`` at the end), for FetchSnapshot. The whole file is
        CRC-checked once before the first chunk is served.

        Raises ``SnapshotNotFoundError``, ``CorruptSnapshotError``,
        ``ValueError`` if ``position`` is outside ``[0, size]`` or
        ``max_bytes`` is not positive.
        """
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        if snapshot_id not in self._verified:
            self.read(snapshot_id)
        size = self.size(snapshot_id)
        if not 0 <= position <= size:
            raise ValueError(f"position {position} is outside snapshot {snapshot_id} of {size} bytes")
        fd = os.open(self.path_of(snapshot_id), os.O_RDONLY)
        try:
            return os.pread(fd, min(max_bytes, size - position), position)
        finally:
            os.close(fd)

    def writer(self, snapshot_id: SnapshotId) -> SnapshotWriter:
        """A writer that receives the file bytes of ``snapshot_id`` in
        chunks (FetchSnapshot on a follower). Starting a new writer for an id
        abandons any unfinished one. Raises ``OSError``, ``ValueError``."""
        _check_id(snapshot_id)
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:
            previous.abort()
        writer = SnapshotWriter(self, snapshot_id)
        self._writers[snapshot_id] = writer
        return writer

    def delete(self, snapshot_id: SnapshotId) -> bool:
        """Remove one snapshot; False if it did not exist. Raises ``OSError``."""
        try:
            os.unlink(self.path_of(snapshot_id))
        except FileNotFoundError:
            return False
        self._verified.discard(snapshot_id)
        return True

    def delete_older_than(self, snapshot_id: SnapshotId) -> list[SnapshotId]:
        """Remove every snapshot with a lower end offset than ``snapshot_id``
        and return their ids. Not fsynced: a deleted snapshot that comes
        back after a crash is merely redundant. Raises ``OSError``."""
        removed = []
        for old in self.list():
            if old.end_offset < snapshot_id.end_offset and self.delete(old):
                removed.append(old)
        return removed

    def _forget_writer(self, writer: SnapshotWriter) -> None:
        if self._writers.get(writer.snapshot_id) is writer:
            del self._writers[writer.snapshot_id]

    def close(self) -> None:
        """Abort unfinished writers."""
        for writer in list(self._writers.values()):
            writer.abort()


class SnapshotWriter:
    """Receives a snapshot file in order, chunk by chunk, into
    ``<name>.part``; ``finish`` checks it and publishes it atomically.
    Usable as a context manager: leaving the block without ``finish``
    aborts."""

    def __init__(self, store: SnapshotStore, snapshot_id: SnapshotId) -> None:
        self._store = store
        self.snapshot_id = snapshot_id
        self._final_path = store.path_of(snapshot_id)
        self._part_path = self._final_path.with_name(self._final_path.name + PART_SUFFIX)
        self._fd = os.open(self._part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._position = 0
        self._done = False

    @property
    def position(self) -> int:
        """Bytes received so far: the position the next chunk must start at."""
        return self._position

    def append(self, position: int, chunk: bytes) -> None:
        """Add ``chunk`` at byte ``position`` of the file.

        Raises ``ValueError`` if ``position`` is not exactly the bytes
        received so far (a lost, repeated or reordered chunk: the caller
        must re-fetch from ``self.position``), or if the writer is finished;
        ``OSError`` on I/O failure.
        """
        if self._done:
            raise ValueError(f"snapshot writer for {self.snapshot_id} is already finished or aborted")
        if position != self._position:
            raise ValueError(
                f"snapshot {self.snapshot_id}: chunk at byte {position}, but {self._position} bytes were received"
            )
        write_all(self._fd, chunk)
        self._position += len(chunk)

    def finish(self, *, _trusted: bool = False) -> SnapshotId:
        """Check the received file (header, id, size, payload CRC), make it
        durable and publish it under its final name. Returns the id.

        Raises ``CorruptSnapshotError`` (the partial file is removed; fetch
        again), ``ValueError`` if already finished, ``OSError``.
        """
        if self._done:
            raise ValueError(f"snapshot writer for {self.snapshot_id} is already finished or aborted")
        try:
            if not _trusted:
                self._verify()
            if self._store._fsync:
                data_sync(self._fd)
        except BaseException:
            self.abort()
            raise
        os.close(self._fd)
        self._done = True
        self._store._forget_writer(self)
        os.replace(self._part_path, self._final_path)
        if self._store._fsync:
            fsync_directory(self._store.directory)
        self._store._verified.add(self.snapshot_id)
        return self.snapshot_id

    def _verify(self) -> None:
        raw = self._part_path.read_bytes()
        try:
            if len(raw) < SNAPSHOT_HEADER_BYTES:
                raise ValueError(f"only {len(raw)} bytes received")
            header = parse_snapshot_header(raw)
            if header.snapshot_id != self.snapshot_id:
                raise ValueError(f"the header says {header.snapshot_id}")
            decode_snapshot(raw)
        except ValueError as error:
            raise CorruptSnapshotError(f"received snapshot {self.snapshot_id} is damaged: {error}") from None

    def abort(self) -> None:
        """Discard what was received. Idempotent."""
        if self._done:
            return
        self._done = True
        self._store._forget_writer(self)
        os.close(self._fd)
        try:
            os.unlink(self._part_path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()


def _check_id(snapshot_id: SnapshotId) -> None:
    if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
        raise ValueError(f"bad snapshot id {snapshot_id}")
    if snapshot_id.end_offset >= 10**20 or snapshot_id.epoch >= 2**32:
        raise ValueError(f"snapshot id {snapshot_id} does not fit the file name format")
