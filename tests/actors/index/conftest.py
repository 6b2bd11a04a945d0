from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.index_cluster import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    """A cluster of index managers on fakes (tests/support/index_cluster.py), empty."""
    return Cluster(tmp_path / "generations")
