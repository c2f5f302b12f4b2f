"""Three broker processes on a real ZooKeeper, every listener SASL_PLAINTEXT and the brokers'
own connections authenticating with SCRAM-SHA-512 (sasl.mechanism.inter.broker.protocol and the
listener's JAAS username/password, as Kafka brokers log in; the brokers' credential written to
ZooKeeper before they start): followers fetch and stay in the ISR; a SCRAM credential added
through one broker authenticates on another within seconds (the /config/changes notification),
and a deleted one stops doing so."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramMechanism,
    UserScramCredentialDeletion,
)
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism as KpScramMechanism
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

from embedded.ports import free_port
from storage_core.security.sasl_client_authenticator import (
    SaslAuthenticationFailedError,
    authenticate_sasl,
)
from storage_core.security.scram.scram_credential import ScramCredential, credential_to_string
from storage_core.security.scram.scram_mechanism import ScramMechanism as ScramMechanism512
from storage_core.zk.config_entity import ConfigEntityZkStore
from storage_core.zk.zookeeper_client import ZooKeeperClient
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.integration.test_sasl_authentication import (
    ADMIN,
    TIMEOUT_S,
    add_scram_user,
    confluent,
    kafka_python,
    sasl_overrides,
)

cluster_support.require_java()
pytestmark = pytest.mark.timeout(240)

BROKERS = (1, 2, 3)
BROKER_LOGIN = ("broker", "broker-secret")
SCRAM_SHA_512 = ScramMechanism512.SCRAM_SHA_512
PROPAGATION_S_MAX = 5.0
REPLICA_LAG_MS = 3000


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, BrokerProcess]]:
    directory = tmp_path_factory.mktemp("sasl-cluster")
    with cluster_support.zookeeper_ensemble(directory / "zk") as zk:
        connect = f"{zk.connect_string}/sasl-{uuid.uuid4().hex[:8]}"
        # the brokers' own SCRAM credential, in ZooKeeper before any broker starts (what
        # kafka-configs.sh --zookeeper does, and Kafka's SaslScramSslEndToEndAuthorizationTest)
        session = ZooKeeperClient(connect).start()
        try:
            credential = ScramCredential.generate(SCRAM_SHA_512, BROKER_LOGIN[1], 4096)
            ConfigEntityZkStore(session.zk).change_user_config(
                BROKER_LOGIN[0],
                lambda config: {**config, "SCRAM-SHA-512": credential_to_string(credential)},
            )
        finally:
            session.close()
        started: dict[int, BrokerProcess] = {}
        try:
            for broker_id in BROKERS:
                port = free_port()
                started[broker_id] = BrokerProcess(
                    directory / f"broker-{broker_id}",
                    port=port,
                    overrides={
                        **sasl_overrides(port),
                        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                            "org.apache.kafka.common.security.scram.ScramLoginModule required"
                            f' username="{BROKER_LOGIN[0]}" password="{BROKER_LOGIN[1]}";'
                        ),
                        "broker.id": str(broker_id),
                        "zookeeper.connect": connect,
                        "zookeeper.session.timeout.ms": "6000",
                        "offsets.topic.replication.factor": "1",
                        "auto.leader.rebalance.enable": "false",
                        "replica.lag.time.max.ms": str(REPLICA_LAG_MS),
                    },
                ).start()
            yield started
        finally:
            for broker in started.values():
                broker.kill()


class _One:
    """``add_scram_user``'s view of one broker (its bootstrap only)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.bootstrap = broker.bootstrap
        self.port = broker.port


def _scram_login(broker: BrokerProcess, user: str, password: str) -> bool:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        try:
            authenticate_sasl(sock, mechanism="SCRAM-SHA-512", username=user, password=password)
        except SaslAuthenticationFailedError:
            return False
    return True


def test_followers_replicate_over_sasl(brokers: dict[int, BrokerProcess]) -> None:
    admin = AdminClient(confluent(brokers[1], "PLAIN", *ADMIN))
    topic = f"replicated-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=TIMEOUT_S)
    producer = Producer({**confluent(brokers[1], "PLAIN", *ADMIN), "acks": "all"})
    for i in range(300):
        producer.produce(topic, b"v%d" % i, partition=i % 3)
    assert producer.flush(TIMEOUT_S) == 0
    time.sleep(2 * REPLICA_LAG_MS / 1000)  # a follower that cannot fetch leaves the ISR by now
    partitions = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
    assert {p: sorted(m.isrs) for p, m in partitions.items()} == {p: [1, 2, 3] for p in range(3)}


def test_a_credential_added_on_one_broker_authenticates_on_another(
    brokers: dict[int, BrokerProcess],
) -> None:
    user = f"hana-{uuid.uuid4().hex[:6]}"
    assert not _scram_login(brokers[3], user, "hana-pw")
    added_at = time.monotonic()
    add_scram_user(_One(brokers[1]), user, "hana-pw")  # type: ignore[arg-type]
    while not _scram_login(brokers[3], user, "hana-pw"):
        assert time.monotonic() - added_at < PROPAGATION_S_MAX, "not propagated in time"
        time.sleep(0.05)
    propagation_s = time.monotonic() - added_at
    print(f"credential usable on broker 3 {propagation_s:.3f} s after AlterUserScram on broker 1")
    producer = Producer({**confluent(brokers[3], "SCRAM-SHA-512", user, "hana-pw"), "acks": "all"})
    producer.produce("hana-topic", b"hello")
    assert producer.flush(TIMEOUT_S) == 0

    admin = AdminClient(confluent(brokers[2], "PLAIN", *ADMIN))
    deletions = [
        UserScramCredentialDeletion(user, m)
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(deletions).values():
        future.result(timeout=TIMEOUT_S)
    deleted_at = time.monotonic()
    while _scram_login(brokers[1], user, "hana-pw"):
        assert time.monotonic() - deleted_at < PROPAGATION_S_MAX, "deletion not propagated"
        time.sleep(0.05)


def test_kafka_python_alter_on_any_broker(brokers: dict[int, BrokerProcess]) -> None:
    """kafka-python sends AlterUserScramCredentials to whichever broker it likes, the
    controller or not: every broker serves it."""
    user = f"kim-{uuid.uuid4().hex[:6]}"
    for broker_id in BROKERS:
        admin = KafkaAdminClient(
            bootstrap_servers=brokers[broker_id].bootstrap, **kafka_python("PLAIN", *ADMIN)
        )
        try:
            upsertion = KpUpsertion(user, KpScramMechanism.SCRAM_SHA_512, f"pw-{broker_id}")
            assert admin.alter_user_scram_credentials([upsertion]) == {user: None}
        finally:
            admin.close()
        deadline = time.monotonic() + PROPAGATION_S_MAX
        while not all(_scram_login(b, user, f"pw-{broker_id}") for b in brokers.values()):
            assert time.monotonic() < deadline, (
                f"the change through broker {broker_id} did not reach all"
            )
            time.sleep(0.05)
