"""A long campaign's history is a directory of Parquet chunks
(``history.parquet/part-NNNNN.parquet``, docs/history.md): both checkers
read it as one history, with the same verdicts as its JSON lines."""

from __future__ import annotations

import json
import shutil

import pytest

from _checker_helpers import comparable
from jepsen_like.campaign._history import ParquetChunks
from jepsen_like.checker import check, check_reference, discover_histories, synthesize


def _chunked_copy(source, target, chunk_events: int) -> int:
    """``source``'s campaign directory with its history as Parquet chunks
    of ``chunk_events`` events, written as the campaign's recorder writes
    them. Returns the number of chunks."""
    shutil.copytree(source, target)
    (target / "history.jsonl").unlink()
    chunks = ParquetChunks(target / "history.parquet", chunk_events=chunk_events)
    with open(source / "history.jsonl", encoding="utf-8") as lines:
        for line in lines:
            chunks.add(json.loads(line))
    chunks.finish()
    return chunks.chunks_written


def _whole_and_chunked(tmp_path):
    plant = {"stale-read": 1, "lost-write": 1, "split-brain": 1}
    synthesize(tmp_path / "histories" / "whole", ops=150, keys=2, plant=plant, seed=5)
    # Three chunks: enough to split operations across files (few, as every
    # file is a Spark task; a long run's chunks hold 20,000 events each).
    assert _chunked_copy(tmp_path / "histories" / "whole", tmp_path / "histories" / "chunked", chunk_events=130) == 3
    [source] = discover_histories([tmp_path / "histories" / "chunked"])
    assert (source.path.name, source.file_format) == ("history.parquet", "parquet")
    return tmp_path / "histories"


def _by_history(results) -> dict:
    found = {r.history: r.to_dict() for r in results}
    for result in found.values():
        result.pop("path")
        result.pop("history")
    return found


def test_the_reference_checker_reads_a_directory_of_parquet_chunks_as_one_history(tmp_path):
    results = _by_history(check_reference([str(_whole_and_chunked(tmp_path))]))
    assert results["whole"]["valid"] is False
    assert results["chunked"] == results["whole"]


@pytest.mark.long  # minutes on a loaded 2-core machine (Spark's first job): make soak; the reference twin above in make test
def test_the_spark_job_reads_a_directory_of_parquet_chunks_as_one_history(spark, tmp_path):
    histories = _whole_and_chunked(tmp_path)
    spark_results = _by_history(check([str(histories)], spark=spark, all_keys=True))
    reference_results = _by_history(check_reference([str(histories)]))
    assert spark_results["whole"]["valid"] is False
    assert comparable(spark_results["chunked"]) == comparable(spark_results["whole"])
    assert comparable(spark_results["chunked"]) == comparable(reference_results["chunked"])
