"""Property tests: SegmentedLog (and MemoryLogStore) against a plain list,
under random appends, truncations, deletions, flushes, reopenings and torn
tails."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quorum._types import Entry, RecordKind, SnapshotId
from quorum.storage import MemoryLogStore, SegmentedLog
from quorum.storage._format import decode_records, encode_batch, parse_batch

payloads = st.binary(max_size=40)


class LogModel(RuleBasedStateMachine):
    """The model is the list of every record the log should hold, from its
    start offset; the log start may lag a requested deletion point (whole
    segments only) but never pass it."""

    memory = False

    @initialize(segment_bytes_max=st.integers(60, 600), index_interval_bytes=st.integers(16, 300))
    def setup(self, segment_bytes_max, index_interval_bytes):
        self.directory = Path(tempfile.mkdtemp(prefix="storage-model-"))
        self.options = dict(
            segment_bytes_max=segment_bytes_max, index_interval_bytes=index_interval_bytes, fsync=False
        )
        self.log = MemoryLogStore() if self.memory else SegmentedLog.open(self.directory, **self.options)
        self.model: list[Entry] = []
        self.start = 0
        self.durable_end = 0
        self.epoch = 1

    def teardown(self):
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def end(self):
        return self.start + len(self.model)

    @rule(data=st.lists(st.tuples(payloads, st.booleans(), st.booleans()), min_size=1, max_size=8))
    def append(self, data):
        entries = []
        for payload, bump, control in data:
            if bump:
                self.epoch += 1
            kind = RecordKind.LEADER_CHANGE if control else RecordKind.DATA
            entries.append(Entry(self.end + len(entries), self.epoch, kind, payload))
        self.log.append(entries)
        self.model.extend(entries)

    @rule(data=st.data())
    def truncate(self, data):
        target = data.draw(st.integers(self.start, self.end + 2))
        self.log.truncate_to(target)
        if target < self.end:
            del self.model[target - self.start :]
            self.durable_end = self.end  # a truncation fsyncs everything before it

    @rule(data=st.data())
    def delete_before(self, data):
        target = data.draw(st.integers(self.start, self.end + 3))
        self.log.delete_before(target)
        new_start = self.log.log_start_offset
        assert self.start <= new_start <= target
        if target >= self.end:
            assert new_start == target  # everything went: the log restarts there
        del self.model[: new_start - self.start]
        self.start = new_start
        self.durable_end = max(self.durable_end, new_start)

    @rule(data=st.data())
    def reset(self, data):
        target = data.draw(st.integers(self.start, self.end + 3))
        epoch = max(self.epoch, self.model[-1].epoch if self.model else 0)
        self.log.reset(SnapshotId(target, epoch))
        assert (self.log.log_start_offset, self.log.end_offset, self.log.last_epoch) == (target, target, epoch)
        self.model = []
        self.start = self.durable_end = target

    @rule()
    def flush(self):
        self.log.flush()
        self.durable_end = self.end

    @precondition(lambda self: self.memory)
    @rule(keep=st.integers(0, 5))
    def crash(self, keep):
        """MemoryLogStore: a crash keeps the flushed prefix, plus at most
        ``keep`` unsynced records."""
        self.log.crash(keep)
        del self.model[min(self.durable_end + keep, self.end) - self.start :]
        self.durable_end = self.end

    @precondition(lambda self: not self.memory)
    @rule()
    def reopen(self):
        self.log.close()
        self.log = SegmentedLog.open(self.directory, **self.options)

    @precondition(lambda self: not self.memory)
    @rule(cut=st.integers(1, 200))
    def tear_tail(self, cut):
        """A crash tore the end of the last segment: after recovery the log
        must be a batch-aligned prefix of what it held."""
        self.log._close_fds()
        last = sorted(self.directory.glob("*.log"))[-1]
        data = last.read_bytes()
        last.write_bytes(data[: max(0, len(data) - cut)])
        self.log = SegmentedLog.open(self.directory, **self.options)
        assert self.log.log_start_offset == self.start
        assert self.log.end_offset <= self.end
        del self.model[self.log.end_offset - self.start :]
        self.durable_end = min(self.durable_end, self.end)

    @rule(data=st.data())
    def read(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        max_bytes = data.draw(st.integers(0, 300))
        got = self.log.read(offset, max_bytes)
        expected = self.model[offset - self.start :]
        assert got == expected[: len(got)]
        if expected:
            assert got, "read must return at least one record"
        assert len(got) <= 1 or sum(5 + len(e.data) for e in got) <= max_bytes

    @invariant()
    def bounds(self):
        if not hasattr(self, "log"):
            return
        assert self.log.log_start_offset == self.start
        assert self.log.end_offset == self.end
        if self.model:
            assert self.log.last_epoch == self.model[-1].epoch

    @invariant()
    def contents(self):
        if hasattr(self, "log"):
            assert list(self.log.entries_from()) == self.model


TestSegmentedLogModel = LogModel.TestCase
TestSegmentedLogModel.settings = settings(stateful_step_count=30)


class MemoryLogModel(LogModel):
    memory = True


TestMemoryLogModel = MemoryLogModel.TestCase
TestMemoryLogModel.settings = settings(stateful_step_count=30)


@given(
    st.integers(0, 2**63),
    st.integers(0, 2**32 - 1),
    st.lists(st.tuples(st.sampled_from(list(RecordKind)), st.binary(max_size=300)), min_size=1, max_size=20),
)
def test_batch_codec_round_trip(base, epoch, records):
    entries = [Entry(base + i, epoch, kind, data) for i, (kind, data) in enumerate(records)]
    raw = encode_batch(base, epoch, entries)
    header = parse_batch(raw, 0, len(raw))
    assert (header.size, header.base_offset, header.epoch, header.count) == (len(raw), base, epoch, len(entries))
    assert decode_records(raw, 0, header) == entries
