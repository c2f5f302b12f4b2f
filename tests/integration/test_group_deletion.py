"""DeleteGroups and OffsetDelete with real clients over loopback, across a broker restart.

confluent-kafka's AdminClient deletes groups (an Empty one is deleted, one with a live member
gets NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND); kafka-python's admin client deletes
offsets (GROUP_SUBSCRIBED_TO_TOPIC while a live consumer subscribes to the topic). After a
SIGTERM restart the deleted group and offsets are still gone; ApiVersions advertises
DeleteGroups 0-2 and OffsetDelete 0, as Kafka 3.9 does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupSubscribedToTopicError, NoError, UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_consumer_groups import confluent_consume, create_topic, produce

pytestmark = pytest.mark.timeout(240)

TOPIC = "orders"
OTHER = "audit"
DEADLINE_S = 60


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        yield process


def delete_groups(broker: BrokerProcess, *group_ids: str) -> dict[str, int | None]:
    """confluent-kafka: group id -> None (deleted) or the Kafka error code."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    outcome: dict[str, int | None] = {}
    for group_id, future in admin.delete_consumer_groups(list(group_ids)).items():
        try:
            future.result(timeout=30)
            outcome[group_id] = None
        except KafkaException as error:
            outcome[group_id] = error.args[0].code()
    return outcome


def listed_groups(broker: BrokerProcess) -> set[str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.list_consumer_groups().result(timeout=30)
    assert not result.errors
    return {g.group_id for g in result.valid}


def committed(broker: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


def live_member(broker: BrokerProcess, group: str) -> Consumer:
    """A subscribed confluent-kafka consumer that holds its assignment (heartbeats run on
    librdkafka's own thread)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + DEADLINE_S
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the live member got no assignment"
        consumer.poll(0.2)
    return consumer


def test_groups_and_offsets_are_deleted_and_stay_deleted_after_a_restart(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, TOPIC, 2)
    create_topic(broker, OTHER, 1)
    sent = produce(broker, TOPIC, "a", 6, 2)
    assert len(confluent_consume(broker, TOPIC, "finished", len(sent))) == len(sent)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:  # the group to delete has offsets of two topics
        admin.alter_group_offsets(
            "finished", {KTopicPartition(OTHER, 0): OffsetAndMetadata(0, "", -1)}
        )
    finally:
        admin.close()
    assert committed(broker, "finished") == {(TOPIC, 0): 3, (TOPIC, 1): 3, (OTHER, 0): 0}
    assert len(confluent_consume(broker, TOPIC, "busy", len(sent))) == len(sent)
    busy = live_member(broker, "busy")
    try:
        assert listed_groups(broker) >= {"finished", "busy"}
        assert delete_groups(broker, "finished", "busy", "never-existed") == {
            "finished": None,
            "busy": KafkaError.NON_EMPTY_GROUP,
            "never-existed": KafkaError.GROUP_ID_NOT_FOUND,
        }
        assert "finished" not in listed_groups(broker)
        assert committed(broker, "finished") == {}

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            result = admin.delete_group_offsets(
                "busy",
                [KTopicPartition(TOPIC, 0), KTopicPartition("no-such-topic", 0)],
            )
        finally:
            admin.close()
        assert result == {
            KTopicPartition(TOPIC, 0): GroupSubscribedToTopicError,
            KTopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError,
        }
        assert committed(broker, "busy") == {(TOPIC, 0): 3, (TOPIC, 1): 3}
    finally:
        busy.close()  # LeaveGroup: "busy" is Empty now

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.delete_group_offsets("busy", [KTopicPartition(TOPIC, 0)])
    finally:
        admin.close()
    assert result == {KTopicPartition(TOPIC, 0): NoError}
    assert committed(broker, "busy") == {(TOPIC, 1): 3}

    broker.restart()
    assert "finished" not in listed_groups(broker)
    assert "busy" in listed_groups(broker)
    assert committed(broker, "finished") == {}
    assert committed(broker, "busy") == {(TOPIC, 1): 3}
    assert delete_groups(broker, "finished", "busy") == {
        "finished": KafkaError.GROUP_ID_NOT_FOUND,
        "busy": None,
    }
    broker.restart()
    assert listed_groups(broker) & {"finished", "busy"} == set()
    assert committed(broker, "busy") == {}


def test_api_versions_advertise_kafka_3_9_ranges(broker: BrokerProcess) -> None:
    with raw_wire.connect(broker.port) as sock:
        keys = {
            k.api_key: (k.min_version, k.max_version) for k in raw_wire.api_versions(sock).api_keys
        }
    assert keys[42] == (0, 2)  # DeleteGroups
    assert keys[47] == (0, 0)  # OffsetDelete
