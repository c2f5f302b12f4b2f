"""Clients and a cluster for the transaction tests that follow Kafka's ``TransactionsTest``:
three brokers on ZooKeeper with its settings (``__transaction_state`` with 3 partitions, RF 2,
min ISR 2; ``__consumer_offsets`` with 1 partition), confluent-kafka producers and consumers.

``TxnCluster`` carries TransactionsTest's hooks (``topic_config``, ``verify_log_start_offsets``,
``maybe_wait_for_at_least_one_segment_upload``, ``maybe_verify_local_log_start_offsets``) so
that a tiered variant (``test_transactions_tiered_store``) runs the same cases, as Kafka's
``TransactionsWithTieredStoreTest`` overrides them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.tiered_broker_support import EARLIEST, list_offset

TIMEOUT_S = 30
NUM_PARTITIONS = 4

CLUSTER_SETTINGS = {
    "auto.create.topics.enable": "false",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "2",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}

# (topic, partition) -> offset, as TransactionsTest's ``Map[TopicPartition, Long]``
PartitionOffsets = Mapping[tuple[str, int], int]


@dataclass
class TxnCluster:
    brokers: dict[int, BrokerProcess]
    admin: AdminClient

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def topic_config(self) -> dict[str, str]:
        """The config of every topic ``topics`` creates (TransactionsTest's ``topicConfig``)."""
        return {"min.insync.replicas": "2"}

    def topics(
        self,
        *names: str,
        partitions: int = NUM_PARTITIONS,
        config: Mapping[str, str] | None = None,
        leader: int | None = None,
    ) -> tuple[str, ...]:
        """Fresh topics (a unique suffix) with 3 replicas, ``topic_config`` and ``config``;
        ``leader`` first in every partition's replicas (its preferred leader)."""
        suffix = uuid.uuid4().hex[:6]
        fresh = tuple(f"{name}-{suffix}" for name in names)
        settings = {**self.topic_config(), **(config or {})}
        if leader is None:
            new_topics = [NewTopic(name, partitions, 3, config=settings) for name in fresh]
        else:
            replicas = [leader, *sorted(set(self.brokers) - {leader})]
            new_topics = [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replica_assignment=[replicas] * partitions,
                    config=settings,
                )
                for name in fresh
            ]
        futures = self.admin.create_topics(new_topics)
        for future in futures.values():
            future.result(TIMEOUT_S)
        for name in fresh:
            eventually(
                lambda name=name: (
                    len(
                        [
                            p
                            for p in cluster_support.partition_leaders(
                                self.bootstrap, name
                            ).values()
                            if p[0] > 0
                        ]
                    )
                    == partitions
                ),
                what=f"leaders for {name}",
            )
        return fresh

    def verify_log_start_offsets(self, expected: PartitionOffsets) -> None:
        """Each partition's log start offset (its leader's ListOffsets earliest) comes to be
        as expected: tiering moves the local log start, never the log start."""
        eventually(
            lambda: all(
                list_offset(self.bootstrap, topic, EARLIEST, partition=index)[0] == offset
                for (topic, index), offset in expected.items()
            ),
            what=f"log start offsets {dict(expected)}",
        )

    def maybe_wait_for_at_least_one_segment_upload(self, partitions: list[tuple[str, int]]) -> None:
        """Nothing without tiered storage."""

    def maybe_verify_local_log_start_offsets(self, expected: PartitionOffsets) -> None:
        """Nothing without tiered storage."""

    def producer(self, transactional_id: str | None = None, **extra: Any) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": transactional_id or f"txn-{uuid.uuid4().hex[:8]}",
                "linger.ms": 5,
                **extra,
            }
        )

    def consumer(self, isolation: str, group: str | None = None, **extra: Any) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group or f"group-{uuid.uuid4().hex[:8]}",
                "isolation.level": isolation,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **extra,
            }
        )


@contextmanager
def txn_cluster(
    zookeeper: ZooKeeperEnsemble, directory: Path, overrides: Mapping[str, str] | None = None
) -> Iterator[TxnCluster]:
    """Three brokers with ``CLUSTER_SETTINGS`` and ``overrides`` (TransactionsTest's
    ``overridingProps``)."""
    settings = {**CLUSTER_SETTINGS, **(overrides or {})}
    with cluster_support.three_brokers(zookeeper, directory, settings) as (brokers, _):
        admin = cluster_support.admin(brokers)
        eventually(lambda: len(admin.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        yield TxnCluster(brokers, admin)


def consume(consumer: Consumer, count: int, *, timeout_s: float = TIMEOUT_S) -> list[Message]:
    """``count`` records (more if they come in the same poll), or fewer when the time is up."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(messages), 0.5):
            if message.error() is None:
                messages.append(message)
    return messages


def nothing_more(consumer: Consumer, wait_s: float = 2.0) -> bool:
    """True if no record arrives within ``wait_s``."""
    return not consume(consumer, 1, timeout_s=wait_s)


def values(messages: list[Message]) -> list[str]:
    return sorted(m.value().decode() for m in messages)


def partition(topic: str, index: int, offset: int = -1001) -> TopicPartition:
    return TopicPartition(topic, index, offset)
