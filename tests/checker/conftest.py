"""Fixtures for the checker's tests (the ``spark`` session fixture is in
tests/conftest.py, shared with tests/docs)."""

from __future__ import annotations

from pathlib import Path

import pytest

PORCUPINE_DIR = Path(__file__).resolve().parents[3] / "shared" / "porcupine"
PORCUPINE_JSONL = PORCUPINE_DIR / "jsonl"


@pytest.fixture(scope="session")
def porcupine_dir() -> Path:
    # The acceptance data: missing is a failure, not a skip.
    assert PORCUPINE_JSONL.is_dir(), f"the Porcupine histories should be at {PORCUPINE_JSONL} (shared/ beside the repo)"
    return PORCUPINE_JSONL
