"""The campaign's memory timeline: rows as the run goes, and the slope read back."""

from __future__ import annotations

import os

from jepsen_like.campaign._memory import COLUMNS, MemoryTimeline, growth_per_operation, rss_bytes


def test_each_sample_is_a_row_and_the_slope_is_fitted_after_the_first_quarter(tmp_path):
    operations = iter([0, 100, 200, 300, 400, 500, 600, 700])
    path = tmp_path / "memory.csv"
    timeline = MemoryTimeline(path, lambda: next(operations), lambda: [os.getpid()])
    for second in range(8):
        timeline.sample(float(second))
    timeline.close()
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    assert len(lines) == 9
    # The nodes' column is this process's RSS (its only "node" here).
    assert all(int(line.split(",")[4]) > 0 for line in lines[1:])

    # Rewrite the RSS and blocks columns with a known slope: 2 KiB and 3 blocks per operation.
    rows = [",".join(COLUMNS)] + [f"{i}.0,{i * 100},{10_000_000 + i * 100 * 2048},{50_000 + i * 300},0" for i in range(8)]
    rows[1] = "0.0,0,99999999999,1,0"  # start-up noise, inside the skipped first quarter
    path.write_text("\n".join(rows) + "\n")
    assert growth_per_operation(path) is None  # a short run: start-up, not growth
    rss_slope, blocks_slope = growth_per_operation(path, min_samples=8)
    assert round(rss_slope) == 2048
    assert round(blocks_slope, 6) == 3.0


def test_no_slope_without_enough_rows_or_operations(tmp_path):
    path = tmp_path / "memory.csv"
    path.write_text(",".join(COLUMNS) + "\n0.0,0,1,1,0\n10.0,0,2,2,0\n20.0,0,3,3,0\n30.0,0,4,4,0\n")
    assert growth_per_operation(path, min_samples=4) is None  # no operations: no per-operation figure
    assert rss_bytes(2**22 + 12345) is None  # no such process
    path.write_text(",".join(COLUMNS) + "\n" + "0.0,x,1,1,0\n" * 80)
    assert growth_per_operation(path) is None  # unreadable rows: no figure, no exception
