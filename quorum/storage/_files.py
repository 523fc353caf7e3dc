"""Small file-system helpers shared by the storage modules.

Durability rules used throughout (POSIX, Linux ext4/xfs semantics):

* ``os.write`` puts bytes in the page cache only; ``fdatasync`` makes a file's
  data (and the metadata needed to read it back, such as its size) durable.
* A new, renamed or deleted directory entry is durable only after the
  *directory* is fsynced.
* ``os.replace`` is atomic: after a crash the name points at the old or the
  new file, never at a mixture. Hence "write temp, fsync, rename, fsync dir".
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

# fdatasync skips the inode timestamps but still persists the file size, which
# is all an append-only file needs; fall back to fsync where it is missing.
_datasync = getattr(os, "fdatasync", os.fsync)


def data_sync(fd: int) -> None:
    """Make the file's data durable. Raises ``OSError`` (e.g. EIO)."""
    _datasync(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` at the fd's current position.

    ``os.write`` on a regular file returns short only on errors such as a
    full disk, in which case the next call raises; the loop makes that
    explicit rather than silently dropping a tail. Raises ``OSError``.
    """
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_directory(directory: Path | str) -> None:
    """fsync a directory so that entries created, renamed or removed in it
    are durable. Raises ``OSError``."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and (if ``fsync``) durably:
    write ``<path>.tmp``, fsync it, rename it over ``path``, fsync the
    directory. A crash leaves either the old or the new content; at worst a
    stray ``.tmp`` file, which readers ignore. Raises ``OSError``."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if fsync:
        fsync_directory(path.parent)


def atomic_write_json(path: Path, fields: dict[str, Any], *, fsync: bool = True) -> None:
    """``atomic_write`` of ``fields`` as checksummed JSON (``encode_checked_json``):
    a small durable record beside a node's data. Raises ``OSError``."""
    atomic_write(path, encode_checked_json(fields), fsync=fsync)


def encode_checked_json(fields: dict[str, Any]) -> bytes:
    """Encode ``fields`` as one JSON object with an added ``crc32`` member:
    zlib.crc32 of the canonical JSON (sorted keys, no spaces) of the other
    members. Human-readable, yet a torn or edited file is detected."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    document = dict(fields)
    document["crc32"] = zlib.crc32(canonical)
    return json.dumps(document, sort_keys=True).encode() + b"\n"


def decode_checked_json(raw: bytes) -> dict[str, Any]:
    """Inverse of ``encode_checked_json``. Raises ``ValueError`` with the
    reason when the content is not JSON, has no CRC, or fails it."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not valid JSON ({error})") from None
    except RecursionError:  # damage can read as nesting past the decoder's stack
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    crc = document.pop("crc32", None)
    if not isinstance(crc, int) or isinstance(crc, bool):
        raise ValueError("missing crc32 field")
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    if zlib.crc32(canonical) != crc:
        raise ValueError(f"CRC mismatch (stored {crc}, computed {zlib.crc32(canonical)})")
    return document


def read_checked_json(path: Path, version: int) -> dict[str, Any] | None:
    """The document ``encode_checked_json`` wrote at ``path``, or None if
    there is no such file. Raises ``ValueError`` with the reason when the
    content is damaged (see ``decode_checked_json``) or its ``version`` is
    not ``version``; ``OSError`` when the file cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    document = decode_checked_json(raw)
    if document.get("version") != version:
        raise ValueError(f"unknown version {document.get('version')!r}")
    return document


def is_plain_int(value: object) -> bool:
    """True for an int that is not a bool (JSON true must not pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)
