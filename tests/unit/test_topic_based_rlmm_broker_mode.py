"""Broker mode in-process: a KafkaBroker on a tmp dir creates __remote_log_metadata, runs
the RLMM over its ReplicaManager and local logs, and restarts from snapshots."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from embedded.ports import free_port
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.server.kafka_broker import KafkaBroker
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.metadata import RemoteLogSegmentState, RemoteResourceNotFoundError
from storage_core.tiered.metadata.snapshot_file import REMOTE_LOG_SNAPSHOT_FILE_NAME
from storage_core.tiered.topic_based_rlmm import (
    COMMITTED_OFFSETS_FILE_NAME,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    BlockingCallOnEventLoopError,
    TopicBasedRemoteLogMetadataManager,
)
from tests.remote_log_metadata_events import copy_started, state_update

T = TypeVar("T")
S = RemoteLogSegmentState


def broker_config(tmp_path: Path, **overrides: str) -> KafkaConfig:
    return KafkaConfig.from_props(
        {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "log.dirs": str(tmp_path / "logs"),
            "offsets.topic.num.partitions": "1",
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.topic.num.partitions": "4",
            "remote.log.metadata.consume.wait.ms": "10000",
            **overrides,
        }
    )


def run(test: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(test(), timeout=60))


def rlmm_of(broker: KafkaBroker) -> TopicBasedRemoteLogMetadataManager:
    manager = broker.remote_log_metadata_manager
    assert manager is not None
    return manager


def test_broker_creates_the_topic_and_serves_its_own_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = KafkaBroker(broker_config(tmp_path))
        await broker.start()
        try:
            info = broker.topic_store.get(REMOTE_LOG_METADATA_TOPIC_NAME)
            assert info is not None and info.internal and len(info.partitions) == 4
            assert info.configs["retention.ms"] == "-1"
            assert info.configs["cleanup.policy"] == "delete"
            topic = broker.admin_manager.create_topic(
                "orders", 2, 1, {"remote.storage.enable": "true"}
            )
            plain = broker.admin_manager.create_topic("plain", 1, 1, {})
            tip = TopicIdPartition(topic.topic_id, TopicPartition("orders", 1))
            rlmm = rlmm_of(broker)

            segment = copy_started(tip, 0, 99)
            await asyncio.to_thread(rlmm.add_remote_log_segment_metadata, segment)
            await asyncio.to_thread(
                rlmm.update_remote_log_segment_metadata,
                state_update(segment, S.COPY_SEGMENT_FINISHED),
            )
            found = rlmm.remote_log_segment_metadata(tip, 0, 10)  # no wait: in memory
            assert found is not None and found.state is S.COPY_SEGMENT_FINISHED
            metadata_partition = rlmm.partitioner.metadata_partition(tip)
            log = broker.replica_manager.get_partition(
                TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
            ).log
            assert log.high_watermark == 2

            with pytest.raises(BlockingCallOnEventLoopError):
                rlmm.add_remote_log_segment_metadata(copy_started(tip, 100, 199))
            # Hosted partitions of remote-storage topics are tracked, others are not.
            await asyncio.sleep(1.2)  # one refresh of the hosted partitions
            other = TopicIdPartition(topic.topic_id, TopicPartition("orders", 0))
            assert rlmm.is_ready(other)
            plain_tip = TopicIdPartition(plain.topic_id, TopicPartition("plain", 0))
            with pytest.raises(RemoteResourceNotFoundError):
                rlmm.highest_offset_for_epoch(plain_tip, 0)
        finally:
            await broker.stop()

    run(scenario)


def test_broker_restart_restores_caches_without_replaying(tmp_path: Path) -> None:
    async def first_run() -> TopicIdPartition:
        broker = KafkaBroker(broker_config(tmp_path))
        await broker.start()
        try:
            topic = broker.admin_manager.create_topic(
                "orders", 1, 1, {"remote.storage.enable": "true"}
            )
            tip = TopicIdPartition(topic.topic_id, TopicPartition("orders", 0))
            rlmm = rlmm_of(broker)
            for index in range(10):
                segment = copy_started(tip, index * 10, index * 10 + 9)
                await asyncio.to_thread(rlmm.add_remote_log_segment_metadata, segment)
                await asyncio.to_thread(
                    rlmm.update_remote_log_segment_metadata,
                    state_update(segment, S.COPY_SEGMENT_FINISHED),
                )
            return tip
        finally:
            await broker.stop()

    tip = run(first_run)
    log_dir = tmp_path / "logs"
    assert (log_dir / "orders-0" / REMOTE_LOG_SNAPSHOT_FILE_NAME).is_file()
    assert (log_dir / COMMITTED_OFFSETS_FILE_NAME).is_file()

    async def second_run() -> None:
        broker = KafkaBroker(broker_config(tmp_path))
        await broker.start()
        try:
            rlmm = rlmm_of(broker)
            for _ in range(100):
                if rlmm.is_ready(tip):
                    break
                await asyncio.sleep(0.05)
            assert rlmm.is_ready(tip)
            assert rlmm.consumer.records_read == 0  # all 20 events came from the snapshot
            segments = list(rlmm.list_remote_log_segments(tip))
            assert [s.start_offset for s in segments] == list(range(0, 100, 10))
            assert {s.state for s in segments} == {S.COPY_SEGMENT_FINISHED}
            assert rlmm.highest_offset_for_epoch(tip, 0) == 99
        finally:
            await broker.stop()

    run(second_run)


def test_no_metadata_manager_without_remote_storage(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = broker_config(tmp_path, **{"remote.log.storage.system.enable": "false"})
        broker = KafkaBroker(config)
        await broker.start()
        try:
            assert broker.remote_log_metadata_manager is None
            assert broker.topic_store.get(REMOTE_LOG_METADATA_TOPIC_NAME) is None
        finally:
            await broker.stop()

    run(scenario)
