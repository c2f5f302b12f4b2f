"""A single broker's metadata side for tests: the single-node store, its registration, the
controller and the metadata cache, and the TopicStore the broker's handlers use."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from storage_core.controller.kafka_controller import ControllerConfig, KafkaController
from storage_core.replication.metadata_cache import MetadataCache
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.server.topic_store import TopicStore
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import BrokerRegistration, EndPoint


class SingleNode:
    """What a broker without zookeeper.connect runs: store, registration, controller, cache."""

    def __init__(self, directory: Path) -> None:
        self.zk = KafkaZkClient.single_node(LocalZNodeTree(directory)).start()
        self.directory = directory

    def start(self, *, remote_storage_system_enable: bool = False) -> TopicStore:
        self.zk.register_broker(
            BrokerRegistration(
                broker_id=0, endpoints=(EndPoint(listener="PLAINTEXT", host="h", port=1),)
            )
        )
        self.cache = MetadataCache(0)
        self.listener = ZkMetadataListener(0, self.zk, self.cache)
        self.listener.start()
        self.controller = KafkaController(
            0,
            self.zk,
            unclean_leader_election_enable=lambda _topic: False,
            config=ControllerConfig(auto_leader_rebalance_enable=False),
        )
        self.controller.start()
        store = TopicStore(
            broker_id=0,
            zk=self.zk,
            controller=self.controller,
            cache=self.cache,
            remote_storage_system_enable=remote_storage_system_enable,
            propagation_timeout_s=10,
        )
        wait_for(lambda: self.controller.is_active and self.cache.image().controller_id == 0)
        return store

    def stop(self) -> None:
        if hasattr(self, "controller"):
            self.controller.shutdown()
            self.listener.stop()
        self.zk.close()


def wait_for(condition: Callable[[], object], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s")
        time.sleep(0.01)


@contextmanager
def single_node_store(
    directory: Path, *, remote_storage_system_enable: bool = False
) -> Iterator[TopicStore]:
    node = SingleNode(directory)
    try:
        yield node.start(remote_storage_system_enable=remote_storage_system_enable)
    finally:
        node.stop()
