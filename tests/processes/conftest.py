import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import ProcessCluster  # noqa: E402


@pytest.fixture
def process_cluster(tmp_path):
    cluster = ProcessCluster(tmp_path)
    cluster.start_all()
    yield cluster
    cluster.stop_all()
