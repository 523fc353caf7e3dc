"""Every example history under docs/examples/histories/ makes the checker
report exactly the checks docs/history.md says it does, with the Spark job
and the reference checker alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HISTORY_MD = ROOT / "docs" / "history.md"
EXAMPLES = ROOT / "docs" / "examples" / "histories"

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_ROW = re.compile(r"^\| \[`(?P<name>[^`]+)`\]\(examples/histories/(?P<path>[^)]+)\) \| (?P<checks>[^|]+?) \|", re.M)


def documented_examples() -> dict[str, tuple[Path, frozenset[str]]]:
    """name -> (path, the checks the page says fail), from history.md's table."""
    table = {}
    for match in _ROW.finditer(HISTORY_MD.read_text()):
        checks = match.group("checks").strip()
        failing = frozenset() if checks == "none (valid)" else frozenset(c.strip() for c in checks.split(","))
        path = EXAMPLES / match.group("path")
        if path.name == "history.jsonl":  # a campaign directory: check all of it
            path = path.parent
        table[match.group("name")] = (path, failing)
    return table


def test_the_page_documents_every_example_and_nothing_else():
    on_disk = {p.name.removesuffix(".jsonl") for p in EXAMPLES.iterdir() if not p.name.endswith(".meta.json")}
    assert set(documented_examples()) == on_disk


def test_every_check_the_checker_has_is_illustrated():
    from jepsen_like.checker import CHECK_NAMES

    illustrated = set().union(*(checks for _, checks in documented_examples().values()))
    assert illustrated == set(CHECK_NAMES)


@pytest.fixture(scope="module")
def spark_results(spark):
    from jepsen_like.checker import check

    examples = documented_examples()
    results = check([str(path) for path, _ in examples.values()], spark=spark)
    return {result.history: result for result in results}


@pytest.fixture(scope="module")
def reference_results():
    from jepsen_like.checker import check_reference

    examples = documented_examples()
    results = check_reference([str(path) for path, _ in examples.values()])
    return {result.history: result for result in results}


@pytest.mark.parametrize("name", sorted(documented_examples()))
def test_the_checker_reports_what_the_page_says(name, spark_results, reference_results):
    _, expected = documented_examples()[name]
    for results in (spark_results, reference_results):
        result = results[name]
        assert set(result.failed_checks()) == expected, (result.checker if hasattr(result, "checker") else "", name)
        assert result.valid is (not expected)
