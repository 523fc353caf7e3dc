"""The ``netns`` marker, registered here so that this directory's tests
need nothing from pyproject.toml; and this directory on sys.path for
``nemesis_servers``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "netns: needs root, iproute2 and nft/iptables; skipped with the reason otherwise")
