"""KIP-368 re-authentication on a SASL_PLAINTEXT listener with connections.max.reauth.ms: the
final SaslAuthenticate carries SessionLifetimeMs; confluent-kafka (librdkafka 2.2+) re-
authenticates one connection while it produces; a credential deleted mid-session is refused at
the next re-authentication; from a raw socket, a request after the session expired closes the
connection, and a re-authentication may change neither the mechanism nor the principal."""

from __future__ import annotations

import json
import logging
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    NewTopic,
    ScramMechanism,
    UserScramCredentialDeletion,
)
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from tests.broker_process import BrokerProcess
from tests.integration.test_sasl_authentication import (
    TIMEOUT_S,
    _read_frame,
    _request,
    add_scram_user,
    confluent,
    confluent_admin,
    kafka_python,
    sasl_overrides,
)

REAUTH_MS = 2000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    overrides = sasl_overrides(port, **{"connections.max.reauth.ms": str(REAUTH_MS)})
    with BrokerProcess(tmp_path_factory.mktemp("reauth"), port=port, overrides=overrides) as b:
        yield b


def _plain_session(broker: BrokerProcess, user: str, password: str) -> tuple[socket.socket, int]:
    """A raw connection authenticated with PLAIN over SaslAuthenticate v1: (socket, lifetime)."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    sock.sendall(_request(17, 1, 1, mechanism="PLAIN"))
    assert _read_frame(sock) is not None
    sock.sendall(_request(36, 1, 2, auth_bytes=f"\0{user}\0{password}".encode()))
    frame = _read_frame(sock)
    assert frame is not None
    assert struct.unpack_from(">h", frame, 4)[0] == 0
    (lifetime_ms,) = struct.unpack(">q", frame[-8:])
    return sock, lifetime_ms


def test_session_lifetime_is_sent_and_an_expired_session_is_closed(broker: BrokerProcess) -> None:
    sock, lifetime_ms = _plain_session(broker, "carol", "carol-secret")
    with sock:
        assert lifetime_ms == REAUTH_MS
        sock.sendall(_request(3, 1, 3, topics=None))
        assert _read_frame(sock) is not None  # within the session: served
        time.sleep(REAUTH_MS / 1000 + 0.3)
        sock.sendall(_request(3, 1, 4, topics=None))
        assert _read_frame(sock) is None  # expired, not re-authenticated: closed
    assert "authenticated session of User:carol expired" in broker.output()


def test_reauthentication_keeps_mechanism_and_principal(broker: BrokerProcess) -> None:
    sock, _ = _plain_session(broker, "carol", "carol-secret")
    with sock:  # the same principal again: the session goes on
        sock.sendall(_request(17, 1, 5, mechanism="PLAIN"))
        assert _read_frame(sock) is not None
        sock.sendall(_request(36, 1, 6, auth_bytes=b"\0carol\0carol-secret"))
        frame = _read_frame(sock)
        assert frame is not None and struct.unpack_from(">h", frame, 4)[0] == 0
        sock.sendall(_request(3, 1, 7, topics=None))
        assert _read_frame(sock) is not None
    time.sleep(1.1)  # at most one re-authentication a second
    sock, _ = _plain_session(broker, "carol", "carol-secret")
    with sock:  # another principal: refused with Kafka's message, then closed
        sock.sendall(_request(17, 1, 5, mechanism="PLAIN"))
        assert _read_frame(sock) is not None
        sock.sendall(_request(36, 1, 6, auth_bytes=b"\0admin\0admin-secret"))
        frame = _read_frame(sock)
        assert frame is not None
        assert struct.unpack_from(">h", frame, 4)[0] == ErrorCode.sasl_authentication_failed.value
        assert b"Cannot change principals during re-authentication from User.carol" in frame
        assert _read_frame(sock) is None
    sock, _ = _plain_session(broker, "carol", "carol-secret")
    with sock:  # another mechanism: the handshake passes, the next token fails, closed
        sock.sendall(_request(17, 1, 5, mechanism="SCRAM-SHA-256"))
        assert _read_frame(sock) is not None
        sock.sendall(_request(36, 1, 6, auth_bytes=b"n,,n=carol,r=abc"))
        assert _read_frame(sock) is None
    assert "is not supported for re-authentication of mechanism 'PLAIN'" in broker.output()


def _stats_connects(stats: list[dict[str, Any]]) -> int:
    last = stats[-1]["brokers"]
    return max(b["connects"] for b in last.values() if b["nodeid"] >= 0)


def test_confluent_reauthenticates_while_producing_then_a_deleted_credential_is_refused(
    broker: BrokerProcess,
) -> None:
    user = f"gina-{uuid.uuid4().hex[:6]}"
    add_scram_user(broker, user, "gina-pw")
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    admin = confluent_admin(broker)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    errors: list[str] = []
    stats: list[dict[str, Any]] = []
    producer = Producer(
        {
            **confluent(broker, "SCRAM-SHA-256", user, "gina-pw"),
            "statistics.interval.ms": 500,
            "stats_cb": lambda text: stats.append(json.loads(text)),
            "error_cb": lambda error: errors.append(error.str()),
        }
    )
    delivered: list[bool] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000  # three session lifetimes
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: delivered.append(err is None))
        producer.poll(0.1)
    assert producer.flush(TIMEOUT_S) == 0
    assert delivered and all(delivered)
    assert errors == []
    # one connection the whole time: re-authenticated, never closed for an expired session
    assert _stats_connects(stats) == 1
    assert f"authenticated session of User:{user} expired" not in broker.output()

    deletions = [UserScramCredentialDeletion(user, m) for m in ScramMechanism if m.value > 0]
    for future in admin.alter_user_scram_credentials(deletions).values():
        future.result(timeout=TIMEOUT_S)
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000 + 5
    while time.monotonic() < deadline and not any("re-authentication" in e for e in errors):
        producer.produce(topic, b"after deletion")
        producer.poll(0.2)
    assert any(
        "Authentication failed during re-authentication due to invalid credentials with SASL"
        " mechanism SCRAM-SHA-256" in e
        for e in errors
    ), errors


def test_kafka_python_reauthenticates_while_producing(
    broker: BrokerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python 3 re-authenticates on its connection (SaslReauthenticator): a producer
    that keeps sending for three session lifetimes is never closed for an expired session."""
    user = f"ivy-{uuid.uuid4().hex[:6]}"
    add_scram_user(broker, user, "ivy-pw")
    topic = f"reauth-kp-{uuid.uuid4().hex[:6]}"
    before = broker.output().count("expired (connections.max.reauth.ms")
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, **kafka_python("SCRAM-SHA-512", user, "ivy-pw")
    )
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    sent = 0
    with caplog.at_level(logging.DEBUG, logger="kafka.net.connection"):
        while time.monotonic() < deadline:
            producer.send(topic, b"x").get(timeout=TIMEOUT_S)
            sent += 1
            time.sleep(0.05)
        producer.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sent > 10
    assert sum("Beginning SASL re-authentication" in m for m in messages) >= 2
    assert not [m for m in messages if "re-authentication failed" in m]
    assert broker.output().count("expired (connections.max.reauth.ms") == before
