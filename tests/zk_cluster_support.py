"""Broker sessions in ZooKeeper for the cluster tests: what a broker does there (its
registration, its controller, its metadata listener), without the rest of the broker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from storage_core.common import TopicPartition
from storage_core.controller.kafka_controller import ControllerConfig, KafkaController
from storage_core.replication.metadata_cache import MetadataCache, MetadataImage, PartitionMetadata
from storage_core.replication.zk_metadata_listener import ZkMetadataListener
from storage_core.zk.kafka_zk_client import KafkaZkClient
from storage_core.zk.local_znode_tree import LocalZNodeTree
from storage_core.zk.zk_data import BrokerRegistration, EndPoint
from tests import cluster_support

T = TypeVar("T")
SESSION_TIMEOUT_MS = 4000


def eventually(check: Callable[[], T], *, timeout_s: float = 20.0, what: str = "") -> T:
    return cluster_support.eventually(check, timeout_s=timeout_s, what=what, poll_s=0.05)


class Node:
    """What a broker does in ZooKeeper: its registration and its controller."""

    def __init__(self, broker_id: int, connect: str, tree: LocalZNodeTree | None = None) -> None:
        self.broker_id = broker_id
        self.connect = connect
        self.tree = tree
        self.zk: KafkaZkClient | None = None
        self.controller: KafkaController | None = None
        self.cache = MetadataCache(broker_id)
        self.listener: ZkMetadataListener | None = None
        self.changes: list[Mapping[TopicPartition, PartitionMetadata | None]] = []
        self.marked: list[set[str]] = []
        self.on_marked: Callable[[Node, set[str]], None] | None = None

    def start(self) -> Node:
        if self.tree is not None:
            self.zk = KafkaZkClient.single_node(self.tree).start()
        else:
            self.zk = KafkaZkClient(
                self.connect, session_timeout_ms=SESSION_TIMEOUT_MS, connection_timeout_ms=10_000
            ).start()
        self.zk.register_broker(
            BrokerRegistration(
                broker_id=self.broker_id,
                endpoints=(
                    EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=9000 + self.broker_id),
                ),
            )
        )
        self.controller = KafkaController(
            self.broker_id,
            self.zk,
            unclean_leader_election_enable=lambda topic: topic.startswith("unclean"),
            config=ControllerConfig(auto_leader_rebalance_enable=False),
        )
        self.controller.start()
        self.listener = ZkMetadataListener(
            self.broker_id,
            self.zk,
            self.cache,
            on_partitions=lambda _image, changes: self.changes.append(dict(changes)),
            on_deletion_marked=self._deletion_marked,
        )
        self.listener.start()
        return self

    def _deletion_marked(self, _image: MetadataImage, topics: set[str]) -> None:
        self.marked.append(topics)
        if self.on_marked is not None:
            self.on_marked(self, topics)

    def crash(self) -> None:
        """The broker dies: its session ends (ephemerals gone), its controller stops acting."""
        assert self.zk is not None and self.controller is not None
        self.zk.close()
        self.controller.shutdown()
        if self.listener is not None:
            self.listener.stop()

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        if self.controller is not None:
            self.controller.shutdown()
        if self.zk is not None:
            self.zk.close()
