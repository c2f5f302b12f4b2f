"""A broker process with remote storage (a local directory or moto's S3) for job tests:
create a remote-enabled topic, produce, copy its segments (the operations library), delete
it, and look at what the metadata and the store hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaProducer

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemotePartitionDeleteState
from storage_core.tiered.remote_object_keys import InvalidRemoteObjectKeyError, parse_object_key
from storage_core.tiered.remote_storage_manager import (
    RemoteStorageManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.broker_process import BrokerProcess
from tests.tiered_broker_support import client_rlmm, copy_eligible_segments, wait_until

SEGMENT_BYTES = 4096
BROKER_SETTINGS = {
    "remote.log.storage.system.enable": "true",
    "remote.log.metadata.topic.num.partitions": "2",
    "remote.log.metadata.topic.replication.factor": "1",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "log.segment.delete.delay.ms": "0",
}


def local_store_settings(directory: Path) -> dict[str, str]:
    return {
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        "rsm.config.local.storage.dir": str(directory),
        "rsm.config.local.fsync": "false",
    }


@dataclass
class TieredCluster:
    broker: BrokerProcess
    store_settings: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def rsm(self) -> RemoteStorageManager:
        rsm_config = {k: v for k, v in self.store_settings.items() if k.startswith("rsm.config.")}
        return load_remote_storage_manager(
            self.store_settings["remote.log.storage.manager.class.name"], rsm_config
        )

    def job_args(self, *extra: str) -> list[str]:
        """The shared job options for this cluster (the broker config names the store)."""
        return [
            "--bootstrap-server",
            self.bootstrap,
            "--broker-config",
            str(self.broker.config_path),
            "--spark-master",
            "local[2]",
            *extra,
        ]

    def create_topic(self, topic: str, partitions: int = 1) -> list[TopicIdPartition]:
        with KafkaCluster(self.bootstrap) as cluster:
            created = KafkaAdminClient(cluster).create_topic(
                topic,
                num_partitions=partitions,
                replication_factor=1,
                configs={"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)},
            )
        assert created.topic_id is not None
        return [
            TopicIdPartition(created.topic_id, TopicPartition(topic, p)) for p in range(partitions)
        ]

    def produce(self, topic: str, count: int, partition: int = 0) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=0)
        try:
            for i in range(count):
                value = f"{topic}-{partition}-{i:05d}-".encode() * 6
                producer.send(topic, value=value, partition=partition).get(timeout=10)
        finally:
            producer.close()

    def copy(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        tp = tip.topic_partition
        partition_dir = self.broker.log_dir / f"{tp.topic}-{tp.partition}"
        rsm = self.rsm()
        try:
            with client_rlmm(self.bootstrap) as rlmm:
                return copy_eligible_segments(self.bootstrap, partition_dir, tp.topic, rsm, rlmm)
        finally:
            rsm.close()

    def delete_topic(self, topic: str, tips: Sequence[TopicIdPartition]) -> None:
        with KafkaCluster(self.bootstrap) as cluster:
            KafkaAdminClient(cluster).delete_topics([topic])
        for tip in tips:
            wait_until(
                lambda tip=tip: (
                    self.delete_state(tip) is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
                ),
                f"{tip} to be marked for deletion",
            )

    def delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        with client_rlmm(self.bootstrap) as rlmm:
            metadata = rlmm.remote_partition_delete_metadata(tip)
        return None if metadata is None else metadata.state

    def segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        with client_rlmm(self.bootstrap) as rlmm:
            return list(rlmm.list_remote_log_segments(tip))

    def object_keys(self, tip: TopicIdPartition | None = None) -> list[str]:
        """Keys in the store (of ``tip`` only, when given)."""
        rsm = self.rsm()
        try:
            keys = [info.key for info in rsm.list_objects()]  # type: ignore[attr-defined]
            prefix: str = rsm.prefix  # type: ignore[attr-defined]
        finally:
            rsm.close()
        if tip is None:
            return keys
        mine = []
        for key in keys:
            try:
                parsed = parse_object_key(key, prefix)
            except InvalidRemoteObjectKeyError:
                continue  # not an object of a segment
            if parsed.segment.topic_id_partition == tip:
                mine.append(key)
        return mine


def replicated_settings(remote_dir: Path) -> dict[str, str]:
    """Every broker of a 3-broker cluster: the shared local store, the remote log metadata
    topic on all three."""
    return {
        **BROKER_SETTINGS,
        **local_store_settings(remote_dir),
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.metadata.topic.replication.factor": "3",
        "replica.fetch.backoff.ms": "200",
    }


def broker_log_dirs_args(brokers: Mapping[int, BrokerProcess]) -> list[str]:
    """``--broker-log-dirs ID=DIR`` for every broker of a cluster."""
    args = []
    for broker_id, broker in sorted(brokers.items()):
        args += ["--broker-log-dirs", f"{broker_id}={broker.log_dir}"]
    return args
