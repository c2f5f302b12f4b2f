"""The broker's Prometheus endpoint, scraped over HTTP while kafka-python produces and fetches.

Counts are checked against independent oracles: the number of records sent, and the size of
the partition's segment file (the bytes appended, and fetched back once by a consumer reading
from the start).
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.prometheus_text import parse_exposition

pytestmark = pytest.mark.timeout(120)

PREFIX = "kafka_server_brokertopicmetrics_"


class MeteredBroker:
    def __init__(self, process: BrokerProcess, metrics_port: int) -> None:
        self.process = process
        self.metrics_port = metrics_port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = response.read().decode("utf-8")
        _, samples = parse_exposition(text)
        return samples

    def raw(self, request: bytes) -> bytes:
        """Send raw bytes, read until the server closes."""
        with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=10) as sock:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeteredBroker]:
    directory: Path = tmp_path_factory.mktemp("metered-broker")
    metrics_port = free_port()
    with BrokerProcess(directory, overrides={"metrics.port": str(metrics_port)}) as process:
        yield MeteredBroker(process, metrics_port)


def _create(broker: MeteredBroker, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.process.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()


def _topic(topic: str | None = None) -> frozenset[tuple[str, str]]:
    return frozenset() if topic is None else frozenset({("topic", topic)})


def _produce(broker: MeteredBroker, topic: str, count: int) -> None:
    producer = KafkaProducer(
        bootstrap_servers=broker.process.bootstrap, acks=1, linger_ms=5, batch_size=4096
    )
    try:
        futures = [producer.send(topic, f"value-{i}".encode() * 3) for i in range(count)]
        producer.flush()
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close()


def _consume(broker: MeteredBroker, topic: str, count: int) -> int:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.process.bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=5_000,
    )
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        received = 0
        for _ in consumer:
            received += 1
            if received == count:
                break
        return received
    finally:
        consumer.close()


def test_produce_and_fetch_are_counted_by_topic_and_broker_wide(broker: MeteredBroker) -> None:
    before = broker.scrape()
    assert before[(PREFIX + "messagesinpersec_count", _topic())] == 0
    count = 500
    topic = "metered"
    _create(broker, topic)
    _produce(broker, topic, count)
    segment = broker.process.log_dir / f"{topic}-0" / "00000000000000000000.log"
    appended_bytes = segment.stat().st_size
    assert appended_bytes > 0

    after_produce = broker.scrape()
    assert after_produce[(PREFIX + "messagesinpersec_count", _topic(topic))] == count
    assert after_produce[(PREFIX + "messagesinpersec_count", _topic())] == count
    assert after_produce[(PREFIX + "bytesinpersec_count", _topic(topic))] == appended_bytes
    assert after_produce[(PREFIX + "bytesinpersec_count", _topic())] == appended_bytes
    produce_requests = after_produce[(PREFIX + "totalproducerequestspersec_count", _topic(topic))]
    assert 1 <= produce_requests <= count
    assert after_produce[(PREFIX + "failedproducerequestspersec_count", _topic(topic))] == 0
    assert after_produce[(PREFIX + "messagesinpersec_meanrate", _topic(topic))] > 0
    assert (PREFIX + "messagesinpersec_oneminuterate", _topic(topic)) in after_produce

    assert _consume(broker, topic, count) == count
    after_fetch = broker.scrape()
    assert after_fetch[(PREFIX + "bytesoutpersec_count", _topic(topic))] == appended_bytes
    assert after_fetch[(PREFIX + "totalfetchrequestspersec_count", _topic(topic))] >= 1
    assert after_fetch[(PREFIX + "failedfetchrequestspersec_count", _topic())] == 0


def test_a_deleted_topic_loses_its_series(broker: MeteredBroker) -> None:
    topic = "short-lived"
    _create(broker, topic)
    _produce(broker, topic, 10)
    assert broker.scrape()[(PREFIX + "messagesinpersec_count", _topic(topic))] == 10
    admin = KafkaAdminClient(bootstrap_servers=broker.process.bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    samples = broker.scrape()
    assert not [key for key in samples if ("topic", topic) in key[1]]
    assert samples[(PREFIX + "messagesinpersec_count", _topic())] >= 10


def test_other_paths_are_404_and_bad_requests_do_not_hurt_the_broker(
    broker: MeteredBroker,
) -> None:
    with pytest.raises(urllib.error.HTTPError) as not_found:
        urllib.request.urlopen(broker.url + "/other", timeout=10)
    assert not_found.value.code == 404

    assert broker.raw(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert broker.raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    oversized = b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 65536 + b"\r\n\r\n"
    assert broker.raw(oversized).startswith(b"HTTP/1.1 431 ")
    assert broker.raw(b"GET /met") == b""  # closed before a complete request: no answer
    head = broker.raw(b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
    # A client that connects and says nothing does not block others.
    with socket.create_connection(("127.0.0.1", broker.metrics_port), timeout=10):
        started = time.monotonic()
        samples = broker.scrape()
        assert time.monotonic() - started < 5

    # The broker still serves scrapes and Kafka clients.
    _create(broker, "after-bad-requests")
    _produce(broker, "after-bad-requests", 3)
    assert broker.scrape()[(PREFIX + "messagesinpersec_count", _topic("after-bad-requests"))] == 3
    assert samples[(PREFIX + "failedproducerequestspersec_count", _topic())] == 0
    assert broker.process.process is not None and broker.process.process.poll() is None
