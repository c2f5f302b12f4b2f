"""TopicManifestWriter on a real local store: the manifest follows the topic's configs,
partition count and replication factor, keeps the job's per-partition figures, writes only
when something changed, never replaces a newer format, and leaves no manifest behind a topic
deleted while it wrote."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from storage_core.clock import ManualClock
from storage_core.common import Uuid
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.recovery.topic_manifest import (
    PartitionRemoteLog,
    TopicManifest,
    TopicManifestError,
    with_topic_settings,
)
from storage_core.tiered.recovery.topic_manifest_writer import TopicManifestWriter, TopicSettings
from storage_core.tiered.remote_object_keys import topic_manifest_key
from storage_core.tiered.remote_storage_manager import RemoteResourceNotFoundError

TOPIC = "orders"
TOPIC_ID = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDEF)
PREFIX = "tiered"
KEY = topic_manifest_key(PREFIX, TOPIC, TOPIC_ID)
SETTINGS = TopicSettings(
    topic_id=TOPIC_ID,
    partition_count=2,
    replication_factor=3,
    configs={"remote.storage.enable": "true", "retention.ms": "604800000"},
)
P0 = PartitionRemoteLog(
    partition=0,
    remote_log_start_offset=0,
    remote_log_end_offset=4199,
    remote_segments=3,
    remote_bytes=3_145_728,
)
EMPTY_P1 = PartitionRemoteLog(
    partition=1,
    remote_log_start_offset=None,
    remote_log_end_offset=None,
    remote_segments=0,
    remote_bytes=0,
)


class Topics:
    """The broker's metadata as the writer asks it: a topic's settings, or None once deleted."""

    def __init__(self) -> None:
        self.settings: TopicSettings | None = SETTINGS
        self.deleted_after_asks: int | None = None
        self.asked = 0

    def __call__(self, topic: str) -> TopicSettings | None:
        assert topic == TOPIC
        self.asked += 1
        if self.deleted_after_asks is not None and self.asked > self.deleted_after_asks:
            return None
        return self.settings


@pytest.fixture
def store(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(tmp_path / "remote", prefix=PREFIX, fsync=False)


def job_manifest() -> TopicManifest:
    """What the topic_manifests job wrote: p0's figures from the remote log metadata."""
    return TopicManifest(
        topic=TOPIC,
        topic_id=TOPIC_ID,
        partition_count=2,
        replication_factor=3,
        configs=SETTINGS.configs,
        partitions=(P0, EMPTY_P1),
        written_at_ms=1_000,
    )


def read(store: LocalTieredStorage) -> TopicManifest:
    return TopicManifest.from_bytes(store.get_object(KEY), where=KEY)


def test_a_config_change_rewrites_the_manifest_keeping_the_jobs_figures(
    store: LocalTieredStorage,
) -> None:
    store.put_object(KEY, job_manifest().to_bytes())
    topics = Topics()
    writer = TopicManifestWriter(store, topics, clock=ManualClock(start_ms=5_000))
    assert writer.maybe_write(TOPIC) is False  # the bucket already says the same
    assert read(store).written_at_ms == 1_000

    topics.settings = replace(SETTINGS, configs={**SETTINGS.configs, "retention.ms": "3600000"})
    assert writer.maybe_write(TOPIC) is True
    rewritten = read(store)
    assert rewritten.configs["retention.ms"] == "3600000"
    assert rewritten.partitions == (P0, EMPTY_P1)
    assert rewritten.written_at_ms == 5_000
    assert writer.maybe_write(TOPIC) is False  # nothing new: no second write

    topics.settings = replace(topics.settings, partition_count=4, replication_factor=2)
    assert writer.maybe_write(TOPIC) is True
    grown = read(store)
    assert (grown.partition_count, grown.replication_factor) == (4, 2)
    assert grown.partitions[:2] == (P0, EMPTY_P1)
    assert [p.remote_segments for p in grown.partitions[2:]] == [0, 0]


def test_a_topic_without_a_manifest_gets_one_without_figures(store: LocalTieredStorage) -> None:
    writer = TopicManifestWriter(store, Topics(), clock=ManualClock(start_ms=7))
    assert writer.maybe_write(TOPIC) is True
    written = read(store)
    assert written.configs == SETTINGS.configs
    assert all(p.remote_log_start_offset is None for p in written.partitions)


def test_a_manifest_changed_by_another_broker_is_read_again_after_forget(
    store: LocalTieredStorage,
) -> None:
    writer = TopicManifestWriter(store, Topics(), clock=ManualClock(start_ms=7))
    assert writer.maybe_write(TOPIC) is True
    store.delete_objects([KEY])  # e.g. leadership moved and came back
    assert writer.maybe_write(TOPIC) is False  # remembered: no read, no write
    writer.forget(TOPIC_ID)
    assert writer.maybe_write(TOPIC) is True
    assert read(store).topic_id == TOPIC_ID


def test_a_newer_manifest_is_never_replaced(store: LocalTieredStorage) -> None:
    document = json.loads(job_manifest().to_bytes())
    document["version"] = 2
    newer = json.dumps(document).encode()
    store.put_object(KEY, newer)
    writer = TopicManifestWriter(store, Topics(), clock=ManualClock(start_ms=7))
    with pytest.raises(TopicManifestError, match="newer format version 2"):
        writer.maybe_write(TOPIC)
    assert store.get_object(KEY) == newer


def test_a_topic_deleted_while_written_keeps_no_manifest(store: LocalTieredStorage) -> None:
    topics = Topics()
    topics.deleted_after_asks = 1
    writer = TopicManifestWriter(store, topics, clock=ManualClock(start_ms=7))
    assert writer.maybe_write(TOPIC) is False
    with pytest.raises(RemoteResourceNotFoundError):
        store.get_object(KEY)


def test_partitions_never_shrink() -> None:
    with pytest.raises(ValueError, match="partitions are never removed"):
        with_topic_settings(
            job_manifest(),
            topic=TOPIC,
            topic_id=TOPIC_ID,
            partition_count=1,
            replication_factor=3,
            configs={},
            written_at_ms=1,
        )
