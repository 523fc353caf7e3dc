"""Fixtures for the checker's tests: one Spark session for the whole run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PORCUPINE_DIR = Path(__file__).resolve().parents[3] / "shared" / "porcupine"
PORCUPINE_JSONL = PORCUPINE_DIR / "jsonl"


@pytest.fixture(scope="session")
def spark():
    """A local[2] Spark session shared by every test that needs one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from jepsen_like.checker import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def porcupine_dir() -> Path:
    # The acceptance data: missing is a failure, not a skip.
    assert PORCUPINE_JSONL.is_dir(), f"the Porcupine histories should be at {PORCUPINE_JSONL} (shared/ beside the repo)"
    return PORCUPINE_JSONL
