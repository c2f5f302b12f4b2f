"""Three brokers with a chunked remote tier for the restore_topic cluster and fault tests.

``tiered_brokers(zookeeper, directory)`` starts brokers 1-3 (``cluster_support.three_brokers``)
with ``LocalTieredStorage`` under ``<directory>/remote-tier`` in the chunked format (chunks of
``CHUNK_BYTES``, zstd), ``__remote_log_metadata`` replicated on all three. ``seed_topic``
creates a remote-enabled topic of three partitions on all three brokers (partition p led by
broker p + 1), produces ``RECORDS`` keyed records with headers to each partition through
confluent-kafka with ``acks=all``, then two fillers so that every keyed record sits in a
closed segment, and has each broker copy what it leads with the product's ``storage-core
tier``::

    p0 [1, 2, 3]  p1 [2, 3, 1]  p2 [3, 1, 2]
    local:   [seg 0..k][active: filler]
    remote:  seg 0..k (COPY_SEGMENT_FINISHED, chunked)  (every keyed record)

Jobs run in process (``job``) with broker 1's config, which names the store.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core import cli
from storage_core.client import KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.tiered_broker_support import client_rlmm

SEGMENT_BYTES = 2048
CHUNK_BYTES = 512
RECORDS = 40
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
CLIENT_TIMEOUT_S = 30.0

Record = tuple[int, int | None, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


def settings(remote_dir: Path) -> dict[str, str]:
    return {
        "auto.create.topics.enable": "false",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(remote_dir),
        "rsm.config.local.fsync": "false",
        "rsm.config.chunk.size": str(CHUNK_BYTES),
        "rsm.config.compression.enabled": "true",
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "replica.fetch.backoff.ms": "200",
        "offsets.topic.num.partitions": "3",
    }


@dataclass
class TieredBrokers:
    brokers: dict[int, BrokerProcess]
    remote_dir: Path
    directory: Path

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process is not None)

    def job_args(self, *extra: str) -> list[str]:
        return [
            "--bootstrap-server",
            self.bootstrap,
            "--broker-config",
            str(self.brokers[1].config_path),
            "--lock-dir",
            str(self.directory / "locks"),
            *extra,
        ]

    def job(self, module: Any, *extra: str) -> tuple[int, dict[str, Any]]:
        """Run a job's ``main`` in this process; its exit code and JSON summary."""
        summary_path = self.directory / f"{module.JOB}-summary.json"
        summary_path.unlink(missing_ok=True)
        code = int(module.main(self.job_args(*extra, "--summary-path", str(summary_path))))
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        return code, summary


@contextlib.contextmanager
def tiered_brokers(zookeeper: ZooKeeperEnsemble, directory: Path) -> Iterator[TieredBrokers]:
    remote_dir = directory / "remote-tier"
    with cluster_support.three_brokers(zookeeper, directory, settings(remote_dir)) as (
        started,
        _connect,
    ):
        yield TieredBrokers(brokers=started, remote_dir=remote_dir, directory=directory)


def record_of(topic: str, partition: int, i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    key = f"{topic}-key-{partition}-{i % 7}".encode()
    value = f"{topic}-{partition}-{i:05d}-".encode() * 4
    headers = [("trace", f"t-{partition}-{i}".encode()), ("n", str(i).encode())]
    return key, value, headers


def create_topic(cluster: TieredBrokers, topic: str) -> Uuid:
    admin = cluster_support.admin(cluster.brokers)  # kept alive until the answer is in
    new_topic = NewTopic(
        topic,
        num_partitions=len(ASSIGNMENT),
        replica_assignment=ASSIGNMENT,
        config={
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "min.insync.replicas": "2",
        },
    )
    admin.create_topics([new_topic])[topic].result(CLIENT_TIMEOUT_S)
    wait_for_isr(cluster, topic, 3)
    with KafkaCluster(cluster.bootstrap) as client:
        described = client.refresh_metadata([topic]).topic(topic)
    assert described is not None and described.topic_id is not None
    return described.topic_id


def wait_for_isr(cluster: TieredBrokers, topic: str, size: int) -> None:
    """Until every live broker's Metadata shows each partition with a leader and ISR ``size``."""
    for broker_id, broker in cluster.brokers.items():
        if broker.process is None:
            continue
        cluster_support.eventually(
            lambda broker=broker: (
                len(states := cluster_support.partition_states(broker.bootstrap, topic))
                == len(ASSIGNMENT)
                and all(leader >= 0 and len(isr) == size for leader, _epoch, isr in states.values())
            ),
            what=f"broker {broker_id} to see {topic} led with ISR of {size}",
            timeout_s=60,
        )


def produce(cluster: TieredBrokers, topic: str, first: int, count: int) -> dict[int, list[int]]:
    """Keyed records with headers ``first..first+count-1`` to every partition, acks=all;
    the offsets acknowledged per partition."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 1}
    )
    acked: dict[int, list[int]] = {p: [] for p in range(len(ASSIGNMENT))}
    failures: list[object] = []

    def delivered(error: object, message: Any) -> None:
        if error is not None:
            failures.append(error)
        else:
            acked[message.partition()].append(message.offset())

    for partition in range(len(ASSIGNMENT)):
        for i in range(first, first + count):
            key, value, headers = record_of(topic, partition, i)
            producer.produce(
                topic, value=value, key=key, headers=headers, partition=partition,
                on_delivery=delivered,
            )  # fmt: skip
            producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert failures == [], failures[:3]
    return acked


def roll(cluster: TieredBrokers, topic: str) -> None:
    """Two fillers of 0.6 segments each per partition: every record before them sits in a
    closed segment."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.num.messages": 1}
    )
    filler = b"f" * int(SEGMENT_BYTES * 0.6)
    for partition in range(len(ASSIGNMENT)):
        for _ in range(2):
            producer.produce(topic, value=filler, partition=partition)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def tier(cluster: TieredBrokers, topic: str) -> None:
    """Each broker copies the partitions it leads (``storage-core tier`` with its config)."""
    for broker in cluster.brokers.values():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli.main(
                [
                    "tier", "--bootstrap-server", cluster.bootstrap,
                    "--broker-config", str(broker.config_path), "--topic", topic,
                ]
            )  # fmt: skip
        assert code == 0, out.getvalue()


def remote_segments(
    bootstrap: str, topic_id: Uuid, topic: str
) -> dict[int, list[RemoteLogSegmentMetadata]]:
    with client_rlmm(bootstrap) as rlmm:
        return {
            p: list(
                rlmm.list_remote_log_segments(TopicIdPartition(topic_id, TopicPartition(topic, p)))
            )
            for p in range(len(ASSIGNMENT))
        }


def seed_topic(
    cluster: TieredBrokers, topic: str, *, leader_change: bool = False
) -> tuple[Uuid, dict[int, int]]:
    """The topic of the module docstring; its id and each partition's last copied offset.
    With ``leader_change`` broker 1 is shut down halfway (partition 0 goes on in epoch 1 on
    broker 2) and started again before the copies."""
    topic_id = create_topic(cluster, topic)
    half = RECORDS // 2 if leader_change else RECORDS
    acked = produce(cluster, topic, 0, half)
    if leader_change:
        cluster.brokers[1].stop()
        cluster_support.eventually(
            lambda: (
                cluster_support.partition_states(cluster.brokers[2].bootstrap, topic)[0][:2]
                == (2, 1)
            ),
            what=f"broker 2 to lead {topic}-0 in epoch 1",
        )
        more = produce(cluster, topic, half, RECORDS - half)
        acked = {p: acked[p] + more[p] for p in acked}
        cluster.brokers[1].start()
        wait_for_isr(cluster, topic, 3)
    assert all(offsets == list(range(RECORDS)) for offsets in acked.values()), acked
    roll(cluster, topic)
    tier(cluster, topic)
    segments = remote_segments(cluster.bootstrap, topic_id, topic)
    ends = {p: max(m.end_offset for m in found) for p, found in segments.items()}
    assert all(len(found) >= 2 for found in segments.values()), segments
    assert all(end >= RECORDS - 1 for end in ends.values()), ends
    return topic_id, ends


def read(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *, group: str | None = None
) -> list[Record]:
    """Records ``start..end`` (inclusive) of the partition: offset, leader epoch, key, value,
    headers."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"reader-{topic}-{partition}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign([ConfluentTopicPartition(topic, partition, start)])
        records: list[Record] = []
        idle = 0
        while (not records or records[-1][0] < end) and idle < 20:
            message = consumer.poll(1.0)
            if message is None:
                idle += 1
                continue
            assert message.error() is None, message.error()
            records.append(
                (
                    message.offset(),
                    message.leader_epoch(),
                    message.key(),
                    message.value(),
                    tuple(message.headers() or ()),
                )
            )
        return [r for r in records if r[0] <= end]
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answers = consumer.committed(
            [ConfluentTopicPartition(topic, p) for p in range(len(ASSIGNMENT))], timeout=20
        )
        return {a.partition: int(a.offset) for a in answers}
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[ConfluentTopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()
