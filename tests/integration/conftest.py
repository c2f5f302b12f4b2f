"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from tests.cluster_support import zookeeper_ensemble


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """One ZooKeeper server for a test module (modules that use it call
    ``cluster_support.require_java()`` first); tests keep apart by chroot."""
    with zookeeper_ensemble(tmp_path_factory.mktemp("zk")) as zk:
        yield zk
