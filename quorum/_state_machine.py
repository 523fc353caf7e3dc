"""A key-value state machine (``quorum.StateMachine``), used by the
command-line tools, the examples and the controller's register map."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack

from ._types import Entry


# The first byte of a msgpack array: fixarray (0x90-0x9f), array 16, array 32.
_ARRAY_HEADS = frozenset((*range(0x90, 0xA0), 0xDC, 0xDD))


class KeyValueStateMachine:
    """A map of byte strings, a register per key. Records (msgpack):

    - ``[key, value]`` — put (a ``None`` value deletes the key);
    - ``["cas", key, expected, new]`` — set ``key`` to ``new`` if its value
      is ``expected`` (``None``: absent); answers ``b"\x01"`` if it did,
      ``b"\x00"`` if not.

    Each key remembers the offset of the record that last wrote it (its
    version). ``apply`` returns the answers of records that have one, by
    offset, so the runtime can hand them to whoever proposed the record.
    """

    # Any bytes are a record (ignored if not one of the above): apply
    # cannot raise, so the host hands it whole batches (``StateMachine``).
    apply_never_raises = True

    CAS_APPLIED = b"\x01"
    CAS_REFUSED = b"\x00"
    # Every record either applies or is skipped (not a key-value command):
    # the host may hand over a whole committed run at once (StateMachine).
    apply_never_raises = True

    def __init__(self) -> None:
        self.values: dict[bytes, tuple[bytes, int]] = {}

    @staticmethod
    def encode_put(key: bytes, value: bytes | None) -> bytes:
        return msgpack.packb([key, value], use_bin_type=True)

    @staticmethod
    def encode_cas(key: bytes, expected: bytes | None, new: bytes) -> bytes:
        return msgpack.packb(["cas", key, expected, new], use_bin_type=True)

    def apply(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        answers: dict[int, bytes] = {}
        is_array_head = _ARRAY_HEADS.__contains__
        for entry in entries:
            data = entry.data
            if not data or not is_array_head(data[0]):
                # Every command is a msgpack array; anything else is no
                # command, known from its first byte without the exception
                # unpacking it raises (about 1 µs a record).
                continue
            try:
                command = msgpack.unpackb(data, raw=False)
            except (ValueError, TypeError, msgpack.UnpackException):
                continue  # not a key-value record: ignored by this machine
            if not isinstance(command, list):
                continue
            if len(command) == 2 and isinstance(command[0], bytes) and isinstance(command[1], (bytes, type(None))):
                key, value = command
                if value is None:
                    self.values.pop(key, None)
                else:
                    self.values[key] = (value, entry.offset)
            elif len(command) == 4 and command[0] == "cas" and isinstance(command[1], bytes) and isinstance(command[3], bytes):
                _, key, expected, new = command
                current = self.values.get(key, (None, -1))[0]
                if current == expected:
                    self.values[key] = (new, entry.offset)
                    answers[entry.offset] = self.CAS_APPLIED
                else:
                    answers[entry.offset] = self.CAS_REFUSED
        return answers

    def query(self, query: bytes) -> bytes | None:
        """A wire ReadRequest's answer: ``msgpack([value, version])`` for the
        key ``query`` (value None and version -1 when never written)."""
        value, version = self.values.get(query, (None, -1))
        return msgpack.packb([value, version], use_bin_type=True)

    @staticmethod
    def decode_answer(answer: bytes) -> tuple[bytes | None, int]:
        """(value, version) from a ``query`` answer."""
        value, version = msgpack.unpackb(answer, raw=False)
        return value, version

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
