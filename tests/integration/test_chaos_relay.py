"""The chaos relay in front of a real broker, with real clients: everything relayed, and a cut
by client id drops and refuses only the matching clients' connections until healed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError as KafkaPythonError

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.chaos.tcp_relay import KafkaRelay
from tests.cluster_support import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[tuple[BrokerProcess, KafkaRelay]]:
    """A broker advertising the relay's port; clients reach it only through the relay."""
    relay_port = free_port()
    broker = BrokerProcess(
        tmp_path / "broker",
        overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay_port}"},
    )
    with KafkaRelay(target_port=broker.port, port=relay_port) as relay, broker:
        admin = AdminClient({"bootstrap.servers": relay.bootstrap})
        admin.create_topics([NewTopic("relayed", 1, 1)])["relayed"].result(10)
        yield broker, relay


def _confluent_producer(relay: KafkaRelay, client_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": relay.bootstrap,
            "client.id": client_id,
            "acks": "all",
            "message.timeout.ms": 4000,
            "reconnect.backoff.max.ms": 200,
        }
    )


def _deliver(producer: Producer, value: bytes) -> int:
    """The offset of ``value`` once delivered; raises the delivery error."""
    outcome: list[object] = []
    producer.produce("relayed", value, partition=0, on_delivery=lambda e, m: outcome.append(e or m))
    producer.flush(10)
    (result,) = outcome
    if isinstance(result, Exception) or not hasattr(result, "offset"):
        raise KafkaException(result)
    return int(result.offset())


def _read_all(client_id: str, relay: KafkaRelay) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": relay.bootstrap,
            "client.id": client_id,
            "group.id": f"g-{client_id}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([CTopicPartition("relayed", 0, 0)])
        _, high = consumer.get_watermark_offsets(CTopicPartition("relayed", 0), timeout=10)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_confluent_clients_through_the_relay_and_a_cut_by_client_id(
    relayed: tuple[BrokerProcess, KafkaRelay],
) -> None:
    _broker, relay = relayed
    writer = _confluent_producer(relay, "app-writer")
    assert _deliver(writer, b"before") == 0
    assert "app-writer" in relay.client_ids()  # the connection went through the relay

    dropped = relay.cut("app-writer*")

    assert dropped >= 1
    with pytest.raises(KafkaException):
        _deliver(writer, b"while cut")
    assert relay.refused["app-writer*"] > dropped  # it reconnected and was refused again
    assert _read_all("app-reader", relay) == [b"before"]  # other clients still pass

    relay.heal("app-writer*")

    eventually(lambda: _deliver(writer, b"after") >= 1, timeout_s=20, what="produce after heal")
    assert _read_all("app-reader-2", relay)[-1] == b"after"
    assert b"while cut" not in _read_all("app-reader-3", relay)


def test_kafka_python_clients_cut_and_healed(relayed: tuple[BrokerProcess, KafkaRelay]) -> None:
    _broker, relay = relayed
    producer = KafkaProducer(
        bootstrap_servers=relay.bootstrap,
        client_id="kp-writer",
        acks="all",
        request_timeout_ms=2000,
        delivery_timeout_ms=3000,
    )
    producer.send("relayed", b"one", partition=0).get(timeout=10)
    relay.cut("kp-*")
    with pytest.raises(KafkaPythonError):
        producer.send("relayed", b"two", partition=0).get(timeout=10)
    producer.close(timeout=5)
    assert relay.refused["kp-*"] >= 1

    relay.heal()

    consumer = KafkaConsumer(bootstrap_servers=relay.bootstrap, client_id="kp-reader")
    consumer.assign([TopicPartition("relayed", 0)])
    consumer.seek_to_beginning()
    values = [r.value for rs in consumer.poll(timeout_ms=5000).values() for r in rs]
    consumer.close()
    assert values[0] == b"one"
