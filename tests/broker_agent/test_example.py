"""examples/partition_leader_service.py runs: three embedded brokers lead
partitions, one dies, its partitions get new leaders with higher leader
epochs, and the store never accepts a write from a deposed leader."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "partition_leader_service.py"

pytestmark = pytest.mark.processes


def load_example():
    spec = importlib.util.spec_from_file_location("partition_leader_service", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


async def test_the_partition_leader_service_fails_over_with_fencing_tokens():
    example = load_example()
    store = await example.demo(5.0, partitions=6, instances=3)
    assert sorted(store.writes) == [("jobs", p) for p in range(6)]
    moved = 0
    for partition, writes in store.writes.items():
        epochs = [epoch for epoch, _, _ in writes]
        assert epochs == sorted(epochs), f"{partition}: a write went back to an older leader epoch"
        writers_by_epoch: dict[int, set[int]] = {}
        for epoch, writer, _ in writes:
            writers_by_epoch.setdefault(epoch, set()).add(writer)
        assert all(len(writers) == 1 for writers in writers_by_epoch.values()), writers_by_epoch
        if writes[0][1] == 101:  # the instance that died led this one
            moved += 1
            assert writes[-1][1] != 101 and writes[-1][0] > writes[0][0]
            # The deposed leader's epoch is refused from now on.
            assert not store.write(partition, writes[0][0], 101, "zombie")
    assert moved > 0


def test_the_example_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--seconds", "1"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "writes; (leader epoch, writer)" in result.stdout and "refused stale writes" in result.stdout


def test_kraft_broker_refuses_bad_arguments_with_a_usage_error():
    kraft_broker = Path(sys.executable).parent / "kraft-broker"
    result = subprocess.run(
        [str(kraft_broker), "--plaintext", "--broker-id", "1", "--bootstrap", "1@127.0.0.1:9", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "is a controller voter id" in result.stderr
