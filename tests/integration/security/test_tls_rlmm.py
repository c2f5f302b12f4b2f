"""The remote log metadata manager's own client goes over the TLS inter-broker listener.

Two brokers on a real ZooKeeper, tiered storage on (a local directory as the remote tier),
``__remote_log_metadata`` with one partition of one replica, on broker M. The inter-broker
listener is TLS with ssl.client.auth=required. Broker U leads a tiered topic and holds no
metadata partition: its metadata manager reads ``__remote_log_metadata-0`` from M through its
own client (``KafkaCluster`` on its inter-broker endpoint), which must speak TLS with the
broker's certificate; a plaintext connection there would be refused and logged as "cannot
read remote log metadata".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from embedded.ports import free_port
from embedded.zookeeper import ZooKeeperEnsemble
from tests.broker_process import BrokerProcess
from tests.cluster_support import brokers_in_cluster, eventually, require_java
from tests.security_support import TestPki, ssl_listener_props

require_java()
pytestmark = pytest.mark.timeout(240)

METADATA_TOPIC = "__remote_log_metadata"
POLL_WAIT_S = 5.0


@pytest.fixture
def cluster(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    pki = TestPki(tmp_path)
    ids = (1, 2)
    plain = {b: free_port() for b in ids}
    per_broker = {}
    for broker_id in ids:
        certificate = pki.issue(f"broker-{broker_id}", f"CN=broker-{broker_id},O=test")
        per_broker[broker_id] = {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain[broker_id]},"
            f"REPLICATION://127.0.0.1:{free_port()}",
            **ssl_listener_props(pki, certificate, client_auth="required"),
        }
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SSL",
        "inter.broker.listener.name": "REPLICATION",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(tmp_path / "remote-tier"),
        "rsm.config.local.fsync": "false",
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "1",
    }
    with brokers_in_cluster(zookeeper, tmp_path, ids, overrides, per_broker=per_broker) as (
        brokers,
        _connect,
    ):
        for broker_id, broker in brokers.items():
            broker.port = plain[broker_id]
        yield brokers


def test_a_broker_reads_remote_log_metadata_from_its_peer_over_tls(
    cluster: dict[int, BrokerProcess],
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap})
    metadata_leader = eventually(
        lambda: (
            admin.list_topics(METADATA_TOPIC, timeout=5).topics[METADATA_TOPIC].partitions[0].leader
        ),
        what=f"{METADATA_TOPIC}-0 has a leader",
    )
    reader_id = next(b for b in cluster if b != metadata_leader)
    reader = cluster[reader_id]
    topic = f"tiered-{uuid.uuid4().hex[:6]}"
    log_start = len(reader.output_path.read_bytes())
    admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replica_assignment=[[reader_id]],
                config={"remote.storage.enable": "true"},
            )
        ]
    )[topic].result(30)

    def reader_log() -> str:
        return reader.output_path.read_bytes()[log_start:].decode(errors="replace")

    eventually(
        lambda: "tracking remote log metadata partition=" in reader_log(),
        what=f"broker {reader_id} tracks {topic}-0",
    )
    time.sleep(POLL_WAIT_S)  # the consumer task's reads of the peer's metadata partition
    assert "cannot read remote log metadata" not in reader_log(), reader_log()[-3000:]
