"""One ZooKeeper server for the replication stories; each story runs its own brokers under a
chroot of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from tests.cluster_support import require_java, zookeeper_ensemble


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    require_java()
    with zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk:
        yield zk
