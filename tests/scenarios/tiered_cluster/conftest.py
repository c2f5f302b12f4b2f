"""Two broker processes on a real ZooKeeper with one remote store (a local directory), per
story; the ZooKeeper server is shared by the stories (each cluster has its own chroot)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from tests.cluster_support import require_java, zookeeper_ensemble
from tests.scenarios.tiered_cluster.stage import ClusterTieredStage


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    require_java()
    with zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk:
        yield zk


@pytest.fixture
def stage(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[ClusterTieredStage]:
    with ClusterTieredStage(zookeeper, tmp_path) as started:
        yield started
