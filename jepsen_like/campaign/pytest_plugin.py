"""pytest fixtures for campaigns against your own state machine
(docs/test-your-state-machine.md). Enable them in a ``conftest.py``::

    pytest_plugins = ["jepsen_like.campaign.pytest_plugin"]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from ._own_system import ReplicatedCluster


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[Callable[..., ReplicatedCluster]]:
    """A factory: ``replicated_cluster(MyReplicated, queries=("read",),
    nodes=3)`` starts node processes serving the class behind the proxy
    network and returns the started :class:`ReplicatedCluster`; every
    cluster it started is stopped (processes and proxy) when the test ends."""
    started: list[ReplicatedCluster] = []

    def start(target: type, **options: Any) -> ReplicatedCluster:
        cluster = ReplicatedCluster(target, tmp_path / f"cluster{len(started)}", **options)
        started.append(cluster.__enter__())
        return cluster

    try:
        yield start
    finally:
        for cluster in reversed(started):
            cluster.__exit__(None, None, None)
