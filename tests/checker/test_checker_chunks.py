"""A long campaign's history is a directory of Parquet chunks
(``history.parquet/part-NNNNN.parquet``, docs/history.md): both checkers
read it as one history, with the same verdicts as its JSON lines."""

from __future__ import annotations

import json
import shutil

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


def test_a_directory_of_parquet_chunks_checks_as_one_history_on_both_paths(spark, tmp_path):
    plant = {"stale-read": 1, "lost-write": 1, "split-brain": 1}
    synthesize(tmp_path / "histories" / "whole", ops=150, keys=2, plant=plant, seed=5)
    assert _chunked_copy(tmp_path / "histories" / "whole", tmp_path / "histories" / "chunked", chunk_events=60) > 4
    [source] = discover_histories([tmp_path / "histories" / "chunked"])
    assert (source.path.name, source.file_format) == ("history.parquet", "parquet")

    spark_results = {r.history: r.to_dict() for r in check([str(tmp_path / "histories")], spark=spark, all_keys=True)}
    reference_results = {r.history: r.to_dict() for r in check_reference([str(tmp_path / "histories")])}
    for results in (spark_results, reference_results):
        for result in results.values():
            result.pop("path")
            result.pop("history")
        assert results["whole"]["valid"] is False
        assert comparable(results["chunked"]) == comparable(results["whole"])
    assert comparable(spark_results["chunked"]) == comparable(reference_results["chunked"])
