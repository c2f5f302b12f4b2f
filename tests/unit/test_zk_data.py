"""The ZooKeeper layout: what Kafka's ZooKeeper mode writes is read, and what is written here
has the shape Kafka's ``ZkData`` writes (documents from Kafka's own tests where they exist)."""

from __future__ import annotations

import json

import pytest

from storage_core.common import TopicPartition, Uuid
from storage_core.zk import zk_data
from storage_core.zk.zk_data import (
    BrokerRegistration,
    ControllerRegistration,
    EndPoint,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    ZNodeDataError,
)

# Kafka's BrokerEndPointTest.testFromJsonV5, as a Kafka 3.x broker registers itself
KAFKA_BROKER_V5 = b"""{
  "version":5, "host":"localhost", "port":9092, "jmx_port":9999, "timestamp":"2233345666",
  "endpoints":["CLIENT://host1:9092", "REPLICATION://host1:9093"],
  "listener_security_protocol_map":{"CLIENT":"SSL", "REPLICATION":"PLAINTEXT"},
  "rack":"dc1",
  "features": {"feature1": {"min_version": 1, "max_version": 2}}
}"""


def test_paths_are_kafkas() -> None:
    tp = TopicPartition("events", 3)
    assert zk_data.broker_path(2) == "/brokers/ids/2"
    assert zk_data.topic_path("events") == "/brokers/topics/events"
    assert zk_data.partition_state_path(tp) == "/brokers/topics/events/partitions/3/state"
    assert zk_data.topic_config_path("events") == "/config/topics/events"
    assert zk_data.delete_topic_path("events") == "/admin/delete_topics/events"
    assert zk_data.CONTROLLER_PATH == "/controller"
    assert zk_data.CONTROLLER_EPOCH_PATH == "/controller_epoch"
    assert zk_data.CLUSTER_ID_PATH == "/cluster/id"


def test_a_kafka_broker_registration_is_read() -> None:
    broker = zk_data.decode_broker(1, KAFKA_BROKER_V5, czxid=4711)
    assert broker.broker_id == 1
    assert broker.broker_epoch == 4711
    assert broker.rack == "dc1"
    client = broker.endpoint("CLIENT")
    assert client == EndPoint(listener="CLIENT", host="host1", port=9092, security_protocol="SSL")
    assert broker.endpoint("REPLICATION") is not None
    assert broker.endpoint("OTHER") is None


def test_broker_registration_round_trips_with_kafkas_fields() -> None:
    registration = BrokerRegistration(
        broker_id=3,
        endpoints=(EndPoint(listener="PLAINTEXT", host="127.0.0.1", port=19092),),
        timestamp_ms=1_700_000_000_000,
    )
    encoded = json.loads(zk_data.encode_broker(registration))
    assert encoded["version"] == 5
    assert (encoded["host"], encoded["port"]) == ("127.0.0.1", 19092)
    assert encoded["endpoints"] == ["PLAINTEXT://127.0.0.1:19092"]
    assert encoded["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert encoded["timestamp"] == "1700000000000"  # a string, as Kafka writes it
    assert "rack" not in encoded
    decoded = zk_data.decode_broker(3, zk_data.encode_broker(registration), czxid=9)
    assert decoded.endpoints == registration.endpoints
    assert decoded.broker_epoch == 9


def test_topic_assignment_round_trips_in_kafkas_layout() -> None:
    topic_id = Uuid.random()
    assignment = TopicAssignment(
        topic="events",
        topic_id=topic_id,
        partitions={
            1: ReplicaAssignment(replicas=(2, 3, 1)),
            0: ReplicaAssignment(replicas=(1, 2, 3), adding_replicas=(3,)),
        },
    )
    encoded = json.loads(zk_data.encode_topic_assignment(assignment))
    assert encoded == {
        "version": 3,
        "topic_id": str(topic_id),
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
        "adding_replicas": {"0": [3]},
        "removing_replicas": {},
    }
    assert zk_data.decode_topic_assignment(
        "events", zk_data.encode_topic_assignment(assignment)
    ) == (assignment)
    # a topic created by an old Kafka has neither topic id nor reassignment fields
    old = zk_data.decode_topic_assignment("old", b'{"version":1,"partitions":{"0":[1]}}')
    assert old.topic_id is None
    assert old.partitions == {0: ReplicaAssignment(replicas=(1,))}


def test_partition_state_round_trips_with_its_znode_version() -> None:
    tp = TopicPartition("events", 0)
    state = LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 1), controller_epoch=7)
    encoded = zk_data.encode_leader_and_isr(state)
    assert json.loads(encoded) == {
        "version": 1,
        "leader": 2,
        "leader_epoch": 5,
        "controller_epoch": 7,
        "isr": [2, 1],
    }
    read = zk_data.decode_leader_and_isr(tp, encoded, zk_version=12)
    assert (read.leader, read.leader_epoch, read.isr, read.zk_version) == (2, 5, (2, 1), 12)


def test_controller_znodes() -> None:
    encoded = zk_data.encode_controller(ControllerRegistration(broker_id=2, timestamp_ms=5))
    assert json.loads(encoded) == {
        "version": 2,
        "brokerid": 2,
        "timestamp": "5",
        "kraftControllerEpoch": -1,
    }
    assert zk_data.decode_controller(encoded, zk_version=0).broker_id == 2
    assert zk_data.encode_controller_epoch(7) == b"7"
    assert zk_data.decode_controller_epoch(b"7") == 7


def test_configs_cluster_id_and_producer_id_block() -> None:
    assert json.loads(zk_data.encode_topic_config({"retention.ms": "1000"})) == {
        "version": 1,
        "config": {"retention.ms": "1000"},
    }
    assert zk_data.decode_topic_config("t", zk_data.encode_topic_config({"a": "1"})) == {"a": "1"}
    assert zk_data.decode_topic_config("t", b"") == {}
    assert json.loads(zk_data.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert zk_data.decode_cluster_id(zk_data.encode_cluster_id("abc")) == "abc"
    block = ProducerIdBlock(broker_id=1, block_start=1000, block_end=1999)
    assert json.loads(zk_data.encode_producer_id_block(block)) == {
        "version": 1,
        "broker": 1,
        "block_start": "1000",
        "block_end": "1999",
    }
    assert zk_data.decode_producer_id_block(zk_data.encode_producer_id_block(block)) == block


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "is empty"),
        (b"not json", "does not hold JSON"),
        (b"[1]", "expected a JSON object"),
        (b'{"leader":"1","leader_epoch":0,"controller_epoch":0,"isr":[1]}', "'leader'"),
        (b'{"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":[1,1]}', "duplicate"),
        (b'{"leader":1,"leader_epoch":-1,"controller_epoch":0,"isr":[1]}', "negative"),
        (b'{"leader":1,"leader_epoch":0,"controller_epoch":0,"isr":"1"}', "isr"),
    ],
)
def test_bad_partition_state_names_the_znode(data: bytes, message: str) -> None:
    with pytest.raises(ZNodeDataError, match=message) as raised:
        zk_data.decode_leader_and_isr(TopicPartition("t", 4), data)
    assert "/brokers/topics/t/partitions/4/state" in str(raised.value)


def test_bad_registrations_and_assignments_are_refused() -> None:
    with pytest.raises(ZNodeDataError, match="no endpoint"):
        zk_data.decode_broker(1, b'{"version":5,"endpoints":[]}')
    with pytest.raises(ZNodeDataError, match="not LISTENER://host:port"):
        zk_data.decode_broker(1, b'{"version":5,"endpoints":["127.0.0.1:9092"]}')
    with pytest.raises(ZNodeDataError, match="duplicate broker"):
        zk_data.decode_topic_assignment("t", b'{"partitions":{"0":[1,1]}}')
    with pytest.raises(ZNodeDataError, match="not a number"):
        zk_data.decode_topic_assignment("t", b'{"partitions":{"x":[1]}}')
    with pytest.raises(ZNodeDataError, match="expected a number"):
        zk_data.decode_controller_epoch(b"seven")
