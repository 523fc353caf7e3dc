"""Reading the small files a user names (a ``--config`` TOML file, an ACL
file): regular files only, and bounded, because the path is the user's
input. ``/dev/zero`` would be read until memory runs out, and a FIFO with
no writer blocks ``open`` in a way SIGTERM cannot end (Python retries the
interrupted call, PEP 475), so a node given one never stopped."""

from __future__ import annotations

import os
import stat
from pathlib import Path

_CHUNK_BYTES = 64 * 1024


def read_small_file(path: str | Path, bytes_max: int) -> bytes:
    """The contents of the regular file at ``path``, at most ``bytes_max``
    bytes. Raises ``OSError`` when it cannot be opened or read, and
    ``ValueError`` when it is not a regular file (a directory, a FIFO, a
    device) or holds more than ``bytes_max`` bytes."""
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a
    # writer, so that fstat can refuse it; it changes nothing for a file.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if status.st_size > bytes_max:
            raise ValueError(f"{path} holds {status.st_size} bytes, over the limit of {bytes_max}")
        chunks: list[bytes] = []
        total = 0
        while total <= bytes_max:  # the file may grow while it is read
            chunk = os.read(descriptor, min(_CHUNK_BYTES, bytes_max + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > bytes_max:
            raise ValueError(f"{path} holds more than {bytes_max} bytes")
        return b"".join(chunks)
    finally:
        os.close(descriptor)
