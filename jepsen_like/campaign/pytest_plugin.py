"""pytest fixtures for campaigns against your own system
(docs/test-your-state-machine.md). Enable them in your top-level
``conftest.py``::

    pytest_plugins = ["jepsen_like.campaign.pytest_plugin"]
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from ._own_system import ProcessCluster, ReplicatedCluster


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[Callable[..., ReplicatedCluster]]:
    """A factory: ``replicated_cluster(MyReplicated, queries=("read",),
    nodes=3)`` starts node processes serving the class behind the proxy
    network and returns the started :class:`ReplicatedCluster`; every
    cluster it started is stopped (processes and proxy) when the test ends."""
    with _started(tmp_path) as start:
        yield lambda target, **options: start(ReplicatedCluster(target, tmp_path / f"cluster-{id(target)}", **options))


@pytest.fixture
def process_cluster(tmp_path: Path) -> Iterator[Callable[..., ProcessCluster]]:
    """A factory: ``process_cluster(command, client_adapter, nodes=1)``
    starts any program's processes behind the proxy network (see
    :class:`ProcessCluster`) and stops them when the test ends."""
    with _started(tmp_path) as start:
        yield lambda command, client_adapter, **options: start(
            ProcessCluster(command, client_adapter, tmp_path / f"cluster-{id(command)}", **options)
        )


class _started:
    def __init__(self, tmp_path: Path) -> None:
        self.clusters: list[Any] = []

    def __enter__(self) -> Callable[[Any], Any]:
        def start(cluster: Any) -> Any:
            self.clusters.append(cluster.__enter__())
            return cluster

        return start

    def __exit__(self, *exc_info: Any) -> None:
        for cluster in reversed(self.clusters):
            cluster.__exit__(None, None, None)
