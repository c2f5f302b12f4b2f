"""Offset commits are answered only once ``__consumer_offsets`` has committed them.

One broker whose ``min.insync.replicas`` (2) is above the offsets topic's replication factor
(1): every acks=-1 append to ``__consumer_offsets`` is refused with NOT_ENOUGH_REPLICAS, which
kafka-python's consumer must see as COORDINATOR_NOT_AVAILABLE (Kafka's mapping), with nothing
visible to OffsetFetch, not even after a restart. Once the topic's ``min.insync.replicas`` is
set to 1 (AlterConfigs, as an operator would), the same commit succeeds and is visible.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import CoordinatorNotAvailableError
from kafka.structs import OffsetAndMetadata

from tests.broker_process import BrokerProcess
from tests.integration.test_consumer_groups import committed_offsets, create_topic

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
GROUP = "billing"
DEADLINE_S = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path, overrides={"min.insync.replicas": "2"}) as process:
        yield process


def commit_outcome(consumer: KafkaConsumer, offset: int) -> object:
    """What kafka-python reports for one commit: the error, or the committed offsets.

    ``commit_async`` does not retry, so the broker's answer reaches the callback as it is.
    """
    outcomes: list[object] = []
    consumer.commit_async(
        {KTopicPartition(TOPIC, 0): OffsetAndMetadata(offset, "", -1)},
        callback=lambda _offsets, outcome: outcomes.append(outcome),
    )
    deadline = time.monotonic() + DEADLINE_S
    while not outcomes and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)  # runs the commit callbacks
    assert outcomes, "the commit was not answered"
    return outcomes[0]


def set_offsets_topic_min_isr(broker: BrokerProcess, value: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    "__consumer_offsets",
                    configs={"min.insync.replicas": value},
                )
            ]
        )
    finally:
        admin.close()


def test_a_commit_is_answered_only_once_the_offsets_partition_committed_it(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, TOPIC, 1)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    try:
        consumer.assign([KTopicPartition(TOPIC, 0)])
        outcome = commit_outcome(consumer, 5)
        assert isinstance(outcome, CoordinatorNotAvailableError), outcome
        assert committed_offsets(broker, GROUP) == {}
    finally:
        consumer.close()
    assert "error_code=not_enough_replicas" in broker.output()

    broker.restart()  # nothing of the refused commit reached the log either
    assert committed_offsets(broker, GROUP) == {}

    set_offsets_topic_min_isr(broker, "1")
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    try:
        consumer.assign([KTopicPartition(TOPIC, 0)])
        outcome = commit_outcome(consumer, 7)
        assert not isinstance(outcome, Exception), outcome
        assert committed_offsets(broker, GROUP) == {0: 7}
    finally:
        consumer.close()
    broker.restart()
    assert committed_offsets(broker, GROUP) == {0: 7}
