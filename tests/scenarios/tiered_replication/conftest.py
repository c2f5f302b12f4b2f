"""The replication stories' ZooKeeper server, shared with the tiered stories."""

from tests.scenarios.replication.conftest import zookeeper

__all__ = ["zookeeper"]
