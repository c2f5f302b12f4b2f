"""A broker process whose remote tier is chunked, compressed and encrypted on the local store.

``chunked_tier(directory)`` starts a ``BrokerProcess`` with ``LocalTieredStorage`` under
``<directory>/remote-tier``, chunks of ``CHUNK_BYTES``, zstd and AES-256-GCM with key pair
``k1`` (PEM files under ``<directory>/keys``), creates ``TOPIC`` (remote storage on, small
segments, local retention of two segments), produces ``RECORDS`` records one batch each,
copies every eligible segment with the operations library (the manager the broker builds from
the same settings) and waits until local retention has deleted the first copied segment, so
that its offsets are served from the remote tier only::

    local:                  [seg j..k][active]
    remote: seg 0..k (COPY_SEGMENT_FINISHED, chunked, encrypted)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaProducer

from jobs import backup_consumer_offsets, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.broker_process import BrokerProcess
from tests.chunked_support import encryption_settings, write_key_pair
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    wait_until,
)

TOPIC = "chunked-tier"
RECORDS = 300
SEGMENT_BYTES = 8 * 1024
CHUNK_BYTES = 1024
MARKER = b"chunked-marker"


def value_of(i: int) -> bytes:
    return MARKER + f"-{i:05d}-".encode() * 8


@dataclass
class ChunkedTier:
    broker: BrokerProcess
    remote_dir: Path
    keys_dir: Path
    rsm_config: dict[str, str]  # what the broker runs with (rsm.config.*)
    topic_id_partition: TopicIdPartition
    copied: list[RemoteLogSegmentMetadata]

    def object_path(self, metadata: RemoteLogSegmentMetadata, suffix: RemoteObjectSuffix) -> Path:
        return self.remote_dir / segment_key("", RemoteSegmentRef.of(metadata), suffix)

    def manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        path = self.object_path(metadata, RemoteObjectSuffix.SEGMENT_MANIFEST)
        return SegmentManifest.from_bytes(path.read_bytes(), where=str(path))

    def corrupt_chunk(self, metadata: RemoteLogSegmentMetadata, chunk_id: int) -> None:
        """Flip one stored byte in the middle of chunk ``chunk_id`` (same size)."""
        chunk = self.manifest(metadata).chunk_index.chunk(chunk_id)
        path = self.object_path(metadata, RemoteObjectSuffix.LOG)
        data = bytearray(path.read_bytes())
        data[chunk.stored_position + chunk.stored_size // 2] ^= 0xFF
        path.write_bytes(bytes(data))


def tier_settings(
    directory: Path, key_ids: tuple[str, ...] = ("k1",), active: str = "k1"
) -> dict[str, str]:
    """``rsm.config.*`` of a chunked, compressed tier encrypted with ``active`` of the ring
    ``key_ids`` (PEM files made once under ``<directory>/keys``)."""
    keys_dir = directory / "keys"
    keys_dir.mkdir(parents=True, exist_ok=True)
    pairs = {
        key_id: (
            write_key_pair(keys_dir, key_id)
            if not (keys_dir / f"{key_id}-public.pem").exists()
            else _existing_pair(keys_dir, key_id)
        )
        for key_id in key_ids
    }
    return {
        "rsm.config.local.storage.dir": str(directory / "remote-tier"),
        "rsm.config.local.fsync": "false",
        "rsm.config.chunk.size": str(CHUNK_BYTES),
        "rsm.config.compression.enabled": "true",
        **encryption_settings(pairs, active),
    }


def _existing_pair(keys_dir: Path, key_id: str) -> dict[str, str]:
    prefix = f"rsm.config.encryption.key.pairs.{key_id}"
    return {
        f"{prefix}.public.key.file": str(keys_dir / f"{key_id}-public.pem"),
        f"{prefix}.private.key.file": str(keys_dir / f"{key_id}-private.pem"),
    }


def broker_overrides(rsm_config: dict[str, str]) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "LocalTieredStorage",
        **rsm_config,
        "remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }


def create_topic(bootstrap: str) -> TopicIdPartition:
    with KafkaCluster(bootstrap) as cluster:
        created = KafkaAdminClient(cluster).create_topic(
            TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(2 * SEGMENT_BYTES),
            },
        )
    assert created.topic_id is not None
    return TopicIdPartition(created.topic_id, TopicPartition(TOPIC, 0))


def produce(bootstrap: str, first: int, count: int) -> None:
    """Records ``first..first+count-1``, one batch each (acks=all)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        for i in range(first, first + count):
            producer.send(TOPIC, value=value_of(i), partition=0).get(timeout=10)
    finally:
        producer.close()


@contextlib.contextmanager
def chunked_tier(
    directory: Path, *, key_ids: tuple[str, ...] = ("k1",), log_level: str = "INFO"
) -> Iterator[ChunkedTier]:
    """The broker and its tier (see the module docstring); the broker's ring holds
    ``key_ids``, segments are copied with ``k1``."""
    settings = tier_settings(directory, key_ids, "k1")
    with BrokerProcess(
        directory / "broker", overrides=broker_overrides(settings), log_level=log_level
    ) as broker:
        tip = create_topic(broker.bootstrap)
        produce(broker.bootstrap, 0, RECORDS)
        rsm = load_remote_storage_manager("LocalTieredStorage", settings)
        try:
            with client_rlmm(broker.bootstrap) as rlmm:
                copied = copy_eligible_segments(
                    broker.bootstrap, broker.log_dir / f"{TOPIC}-0", TOPIC, rsm, rlmm
                )
        finally:
            rsm.close()
        assert len(copied) >= 3, copied
        wait_until(
            lambda: list_offset(broker.bootstrap, TOPIC, EARLIEST_LOCAL)[0] > copied[0].end_offset,
            "local retention to delete the first copied segment",
        )
        yield ChunkedTier(
            broker=broker,
            remote_dir=directory / "remote-tier",
            keys_dir=directory / "keys",
            rsm_config=settings,
            topic_id_partition=tip,
            copied=copied,
        )


@contextlib.contextmanager
def restorable_tier_for_airflow(
    directory: Path, *, group: str, group_offset: int
) -> Iterator[ChunkedTier]:
    """``chunked_tier`` made restorable as the pipeline keeps it (its topic manifest written,
    ``group`` committed at ``group_offset`` and backed up), and named by Airflow's
    ``tiered_storage_default`` connection (the broker's server.properties for the tier's
    settings) while it lasts."""
    with chunked_tier(directory) as tier:
        broker = tier.broker
        common = [
            "--bootstrap-server",
            broker.bootstrap,
            "--broker-config",
            str(broker.config_path),
        ]
        assert topic_manifests.main(common) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        consumer.commit(
            offsets=[ConfluentTopicPartition(TOPIC, 0, group_offset)], asynchronous=False
        )
        consumer.close()
        assert backup_consumer_offsets.main(common) == 0
        os.environ["AIRFLOW_CONN_TIERED_STORAGE_DEFAULT"] = json.dumps(
            {
                "conn_type": "generic",
                "host": "127.0.0.1",
                "port": broker.port,
                "extra": {
                    "log_dirs": [str(broker.log_dir)],
                    "broker_config": str(broker.config_path),
                },
            }
        )
        try:
            yield tier
        finally:
            os.environ.pop("AIRFLOW_CONN_TIERED_STORAGE_DEFAULT", None)
