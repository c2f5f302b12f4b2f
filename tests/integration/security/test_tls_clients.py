"""Real clients over TLS against a broker process with three listeners:

    PLAINTEXT   the inter-broker listener, and clients without TLS
    SSL         TLS, server authentication only
    MTLS        TLS with ssl.client.auth=required (listener.name.mtls.ssl.client.auth)

kafka-python, confluent-kafka (librdkafka) and aiokafka produce and consume over SSL; a client
certificate opens MTLS; Metadata names each client's own listener's ports. The negative cases
assert what the client shows and what the broker logs: PLAINTEXT bytes to the TLS port, TLS to
the PLAINTEXT port, an untrusted server certificate, an expired client certificate, and a
PKCS12 key store whose password is wrong (the broker refuses to start, naming the setting but
not the password).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from embedded.ports import free_port
from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.client.errors import ClientError
from storage_core.security.client_transport import ClientSecurityConfig
from storage_core.security.kafka_principal import SecurityProtocol
from tests.broker_process import BrokerProcess
from tests.security_support import Issued, TestPki, ssl_listener_props

pytestmark = pytest.mark.timeout(180)

RECORDS = 50


class TlsBroker:
    def __init__(self, directory: Path) -> None:
        self.pki = TestPki(directory)
        self.certificate = self.pki.issue("broker", "CN=localhost,OU=brokers,O=test")
        self.alice = self.pki.issue("alice", "CN=alice,OU=eng,O=acme,C=US")
        self.plain_port, self.ssl_port, self.mtls_port = free_port(), free_port(), free_port()
        self.process = BrokerProcess(
            directory / "broker",
            port=self.plain_port,
            overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{self.plain_port},"
                f"SSL://127.0.0.1:{self.ssl_port},MTLS://127.0.0.1:{self.mtls_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": "1",
                **ssl_listener_props(self.pki, self.certificate),
                "listener.name.mtls.ssl.client.auth": "required",
            },
        )

    def log_size(self) -> int:
        return self.process.output_path.stat().st_size

    def wait_for_log(self, offset: int, text: str, timeout_s: float = 10.0) -> None:
        """Until the broker's log, after byte ``offset``, holds ``text``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.process.output_path.open("rb") as log:
                log.seek(offset)
                if text.encode() in log.read():
                    return
            assert time.monotonic() < deadline, f"the broker never logged {text!r}"
            time.sleep(0.1)

    def confluent(self, port: int, client: Issued | None = None, **extra: Any) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_pem),
            **extra,
        }
        if client is not None:
            config["ssl.certificate.location"] = str(client.cert_file)
            config["ssl.key.location"] = str(client.key_file)
        return config


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    tls = TlsBroker(tmp_path_factory.mktemp("tls-broker"))
    tls.process.start()
    try:
        yield tls
    finally:
        tls.process.kill()


def topic_name() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def produce_and_consume_confluent(config: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer({**config, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )  # a group: FindCoordinator, JoinGroup, OffsetFetch over TLS too
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def expected() -> list[bytes]:
    return [f"v{i}".encode() for i in range(RECORDS)]


def test_confluent_kafka_produces_and_consumes_in_a_group_over_ssl(broker: TlsBroker) -> None:
    topic = topic_name()
    assert produce_and_consume_confluent(broker.confluent(broker.ssl_port), topic) == expected()


def test_kafka_python_produces_and_consumes_over_ssl(broker: TlsBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: PLC0415

    topic = topic_name()
    tls = {"security_protocol": "SSL", "ssl_cafile": str(broker.pki.ca_pem)}
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.ssl_port}", acks="all", **tls)
    for i in range(RECORDS):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{broker.ssl_port}",
        consumer_timeout_ms=10_000,
        auto_offset_reset="earliest",
        **tls,
    )
    consumer.assign([TopicPartition(topic, 0)])
    values = [m.value for m in consumer]
    consumer.close()
    assert values == expected()


def test_aiokafka_produces_and_consumes_over_ssl(broker: TlsBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415
    from aiokafka.helpers import create_ssl_context  # noqa: PLC0415

    topic = topic_name()

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=str(broker.pki.ca_pem))
        bootstrap = f"127.0.0.1:{broker.ssl_port}"
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context, acks="all"
        )
        await producer.start()
        try:
            for i in range(RECORDS):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            security_protocol="SSL",
            ssl_context=context,
            auto_offset_reset="earliest",
            group_id=f"g-{topic}",
        )
        await consumer.start()
        values: list[bytes] = []
        try:
            while len(values) < RECORDS:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                values.extend(m.value for messages in batch.values() for m in messages)
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == expected()


def test_a_client_certificate_opens_the_client_auth_listener(broker: TlsBroker) -> None:
    topic = topic_name()
    config = broker.confluent(broker.mtls_port, broker.alice)
    assert produce_and_consume_confluent(config, topic) == expected()


def test_metadata_names_the_ports_of_the_clients_listener(broker: TlsBroker) -> None:
    def broker_ports(config: dict[str, Any]) -> set[int]:
        metadata = AdminClient(config).list_topics(timeout=15)
        return {b.port for b in metadata.brokers.values()}

    assert broker_ports({"bootstrap.servers": broker.process.bootstrap}) == {broker.plain_port}
    assert broker_ports(broker.confluent(broker.ssl_port)) == {broker.ssl_port}
    assert broker_ports(broker.confluent(broker.mtls_port, broker.alice)) == {broker.mtls_port}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def errors_of(config: dict[str, Any], wait_s: float = 10.0) -> list[str]:
    """What librdkafka shows (its error callback and its log) while it tries to reach the
    broker with ``config``, once it reported a failed connection."""
    lines = _Lines()
    logger = logging.getLogger(f"librdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    errors: list[str] = []
    producer = Producer({**config, "error_cb": lambda e: errors.append(str(e)), "logger": logger})
    deadline = time.monotonic() + wait_s
    while not any("FAIL" in line or "Disconnected" in line for line in lines.lines):
        if time.monotonic() > deadline:
            break
        producer.poll(0.2)
    return errors + lines.lines


def test_plaintext_bytes_to_the_tls_port(broker: TlsBroker) -> None:
    from kafka import KafkaProducer  # noqa: PLC0415
    from kafka.errors import KafkaTimeoutError  # noqa: PLC0415

    offset = broker.log_size()
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{broker.ssl_port}",
            request_timeout_ms=3000,
            max_block_ms=3000,
            bootstrap_timeout_ms=3000,  # its bootstrap waits 30 s by default
        )
    shown = errors_of({"bootstrap.servers": f"127.0.0.1:{broker.ssl_port}"})
    assert any("Disconnected" in line or "transport" in line for line in shown), shown
    broker.wait_for_log(offset, "listener=SSL (SSL handshake failed)")


def test_tls_to_the_plaintext_port(broker: TlsBroker) -> None:
    offset = broker.log_size()
    shown = errors_of(broker.confluent(broker.plain_port))
    # librdkafka says either, depending on whether the broker's close or its own failed
    # parse of the (absent) ServerHello comes first: both are a failed TLS handshake
    assert any(
        "SSL handshake failed" in line
        or ("SSL connection closed by peer" in line and "SSL_HANDSHAKE" in line)
        for line in shown
    ), shown
    # the ClientHello read as a frame size
    broker.wait_for_log(offset, "is outside (0, socket.request.max.bytes")


def test_an_untrusted_server_certificate_is_refused_by_the_client(
    broker: TlsBroker, tmp_path: Path
) -> None:
    stranger = TestPki(tmp_path, ca_dn="CN=stranger-ca")
    shown = errors_of(
        {**broker.confluent(broker.ssl_port), "ssl.ca.location": str(stranger.ca_pem)}
    )
    assert any(
        "certificate verify failed" in line and "ssl.ca.location" in line for line in shown
    ), shown


def test_an_expired_client_certificate_is_refused(broker: TlsBroker) -> None:
    expired = broker.pki.issue("old", "CN=old,O=acme", expired=True)
    offset = broker.log_size()
    shown = errors_of(broker.confluent(broker.mtls_port, expired))
    # TLS 1.3: the client finishes first, then the broker refuses its certificate and closes;
    # librdkafka sees the close, or a reset if it had already sent its first request
    assert any(
        "SSL connection closed by peer" in line or "connection reset by peer" in line
        for line in shown
    ), shown
    broker.wait_for_log(
        offset, "listener=MTLS (SSL handshake failed) reason=certificate has expired"
    )


def test_a_pkcs12_keystore_with_a_wrong_password_stops_the_start(tmp_path: Path) -> None:
    pki = TestPki(tmp_path)
    store = pki.issue("broker", "CN=localhost,O=test").pkcs12("Right-Pw-1234")
    ssl_port = free_port()
    process = BrokerProcess(
        tmp_path / "broker",
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{ssl_port}",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(store),
            "ssl.keystore.password": "Wrong-Pw-5678",
        },
    )
    with pytest.raises(RuntimeError, match="broker exited") as refused:
        process.start()
    output = str(refused.value)
    assert "ssl.keystore.password" in output
    assert str(store) in output
    assert "Wrong-Pw-5678" not in output
    assert "Right-Pw-1234" not in output


def test_the_brokers_own_client_connects_with_its_certificate(broker: TlsBroker) -> None:
    """storage_core's client (under the RLMM's producer and consumer, and the tools) through
    ``client_transport``: TLS with a client certificate to the MTLS listener, and refused
    there without one, naming the broker."""
    settings = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(broker.pki.ca_pem),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker.alice.pem_keystore),
    }
    security = ClientSecurityConfig(security_protocol=SecurityProtocol.SSL, settings=settings)
    with KafkaCluster(
        f"127.0.0.1:{broker.mtls_port}", config=ConnectionConfig(security=security)
    ) as cluster:
        metadata = cluster.refresh_metadata()
    assert [(b.host, b.port) for b in metadata.brokers] == [("127.0.0.1", broker.mtls_port)]

    no_certificate = ClientSecurityConfig(
        security_protocol=SecurityProtocol.SSL,
        settings={k: v for k, v in settings.items() if "keystore" not in k},
    )
    with (
        pytest.raises(ClientError, match=f"127.0.0.1:{broker.mtls_port}") as refused,
        KafkaCluster(
            f"127.0.0.1:{broker.mtls_port}",
            config=ConnectionConfig(security=no_certificate, connect_timeout_ms=5000),
        ) as cluster,
    ):
        cluster.refresh_metadata()
    # TLS 1.3: the broker refuses the missing certificate after the client's handshake
    assert "closed the connection" in str(refused.value)
