"""The state machine interface the runtime drives, and a key-value machine
used by the command-line tools and examples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgpack

from .._types import Entry


@runtime_checkable
class StateMachine(Protocol):
    """What a replicated application gives the runtime.

    ``apply`` receives committed data records in offset order, exactly once
    per process lifetime (after a restart, from the latest snapshot on).
    ``snapshot`` returns the state reflecting every record applied so far;
    ``restore`` replaces the state with a snapshot's. All three must be
    deterministic: every replica applies the same records.
    """

    def apply(self, entries: Sequence[Entry]) -> None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class KeyValueStateMachine:
    """A map of byte strings. A record is ``msgpack([key, value])``; a
    ``None`` value deletes the key. Each key remembers the offset of the
    record that last wrote it (its version)."""

    def __init__(self) -> None:
        self.values: dict[bytes, tuple[bytes, int]] = {}

    @staticmethod
    def encode_put(key: bytes, value: bytes | None) -> bytes:
        return msgpack.packb([key, value], use_bin_type=True)

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            try:
                key, value = msgpack.unpackb(entry.data, raw=False)
            except (ValueError, TypeError, msgpack.UnpackException):
                continue  # not a key-value record: ignored by this machine
            if not isinstance(key, bytes) or not isinstance(value, (bytes, type(None))):
                continue
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = (value, entry.offset)

    def query(self, query: bytes) -> bytes | None:
        """A wire ReadRequest's answer: the value of the key ``query``."""
        return self.values.get(query, (None, -1))[0]

    def get(self, key: bytes) -> tuple[bytes | None, int]:
        """(value, version); version -1 when the key was never written."""
        value, version = self.values.get(key, (None, -1))
        return value, version

    def snapshot(self) -> bytes:
        return msgpack.packb(
            [[key, value, version] for key, (value, version) in sorted(self.values.items())], use_bin_type=True
        )

    def restore(self, data: bytes) -> None:
        self.values = {key: (value, version) for key, value, version in msgpack.unpackb(data, raw=False)}
