"""The topic manifest and the consumer offsets backup: round trips, a newer version refused by
name, malformed documents refused naming the object key, sensitive configs never written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from storage_core.client.admin import ConfigEntry
from storage_core.common import Uuid
from storage_core.protocol.config_resource import ConfigSource
from storage_core.tiered.recovery.offsets_backup import (
    CommittedOffset,
    GroupOffsets,
    OffsetsBackup,
    OffsetsBackupError,
    TopicHighWatermarks,
    TopicOffsets,
)
from storage_core.tiered.recovery.topic_manifest import (
    PartitionRemoteLog,
    TopicManifest,
    TopicManifestError,
    topic_configs,
)

TOPIC_ID = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDEF)
MANIFEST_KEY = f"tiered/orders-{TOPIC_ID}/topic-manifest.json"
BACKUP_KEY = "tiered/_consumer-offsets/00000001764454800000.json"


def manifest() -> TopicManifest:
    return TopicManifest(
        topic="orders",
        topic_id=TOPIC_ID,
        partition_count=2,
        replication_factor=3,
        configs={"remote.storage.enable": "true", "retention.ms": "604800000"},
        partitions=(
            PartitionRemoteLog(
                partition=0,
                remote_log_start_offset=0,
                remote_log_end_offset=4199,
                remote_segments=3,
                remote_bytes=3_145_728,
            ),
            PartitionRemoteLog(
                partition=1,
                remote_log_start_offset=None,
                remote_log_end_offset=None,
                remote_segments=0,
                remote_bytes=0,
            ),
        ),
        written_at_ms=1_764_454_800_000,
    )


def backup() -> OffsetsBackup:
    return OffsetsBackup(
        taken_at_ms=1_764_454_800_000,
        topics=(
            TopicHighWatermarks(topic="orders", topic_id=TOPIC_ID, high_watermarks={0: 4200, 1: 0}),
        ),
        groups=(
            GroupOffsets(
                group_id="billing",
                topics=(
                    TopicOffsets(
                        topic="orders",
                        topic_id=TOPIC_ID,
                        partitions=(
                            CommittedOffset(
                                partition=0,
                                committed_offset=4100,
                                committed_leader_epoch=3,
                                metadata="consumer-1 ü",
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def test_topic_manifest_round_trips_as_readable_json() -> None:
    data = manifest().to_bytes()
    document = json.loads(data.decode("utf-8"))
    assert document["format"] == "topic-manifest" and document["version"] == 1
    assert document["topicId"] == str(TOPIC_ID)
    assert document["partitions"][0]["remoteLogEndOffset"] == 4199
    assert document["partitions"][1]["remoteLogStartOffset"] is None
    assert TopicManifest.from_bytes(data, where=MANIFEST_KEY) == manifest()


def test_offsets_backup_round_trips_as_readable_json() -> None:
    data = backup().to_bytes()
    document = json.loads(data.decode("utf-8"))
    assert document["format"] == "consumer-offsets" and document["takenAtMs"] == 1_764_454_800_000
    assert document["groups"][0]["topics"][0]["partitions"][0]["metadata"] == "consumer-1 ü"
    assert document["topics"][0]["highWatermarks"] == [
        {"partition": 0, "highWatermark": 4200},
        {"partition": 1, "highWatermark": 0},
    ]
    assert OffsetsBackup.from_bytes(data, where=BACKUP_KEY) == backup()


def edited(data: bytes, change: Any) -> bytes:
    document = json.loads(data)
    change(document)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("parse", "data", "key", "error"),
    [
        (TopicManifest.from_bytes, manifest().to_bytes(), MANIFEST_KEY, TopicManifestError),
        (OffsetsBackup.from_bytes, backup().to_bytes(), BACKUP_KEY, OffsetsBackupError),
    ],
)
def test_a_newer_version_and_another_format_are_refused_by_name(
    parse: Any, data: bytes, key: str, error: type[Exception]
) -> None:
    newer = edited(data, lambda d: d.update(version=2))
    with pytest.raises(error, match="written by a newer format version 2; this reader knows 1"):
        parse(newer, where=key)
    other = edited(data, lambda d: d.update(format="chunked"))
    with pytest.raises(error, match=f"{key}.*format 'chunked' is not"):
        parse(other, where=key)


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda d: d.pop("topicId"), "missing field 'topicId'"),
        (lambda d: d.update(partitionCount=3), "partitions must be 0..2"),
        (lambda d: d["partitions"][0].update(remoteLogEndOffset=-5), "below its start"),
        (lambda d: d["partitions"][1].update(remoteLogStartOffset=5), "exactly when"),
        (lambda d: d.update(topic="a/b"), "a/b"),
        (lambda d: d.update(configs={"x": 1}), "configs is not an object of strings"),
        (lambda d: d.update(writtenAtMs="today"), "'today' is not an integer"),
    ],
)
def test_a_malformed_topic_manifest_is_named(change: Any, what: str) -> None:
    data = edited(manifest().to_bytes(), change)
    with pytest.raises(TopicManifestError, match=f"topic manifest {MANIFEST_KEY} is unreadable"):
        TopicManifest.from_bytes(data, where=MANIFEST_KEY)
    with pytest.raises(TopicManifestError, match=what.replace(".", r"\.")):
        TopicManifest.from_bytes(data, where=MANIFEST_KEY)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"\xff\xfe", "utf-8"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"format": "consumer-offsets", "version": 1', "Expecting"),
        (
            edited(backup().to_bytes(), lambda d: d["groups"][0]["topics"][0].update(topic="x")),
            "topic 'x'",
        ),
        (
            edited(
                backup().to_bytes(),
                lambda d: d["groups"][0]["topics"][0]["partitions"][0].update(partition=7),
            ),
            "orders-7 has no high watermark",
        ),
        (
            edited(
                backup().to_bytes(),
                lambda d: d["groups"][0]["topics"][0]["partitions"][0].update(committedOffset=-2),
            ),
            "committed offset -2",
        ),
        (edited(backup().to_bytes(), lambda d: d.pop("takenAtMs")), "missing field 'takenAtMs'"),
    ],
)
def test_a_malformed_offsets_backup_is_named(data: bytes, what: str) -> None:
    with pytest.raises(OffsetsBackupError) as info:
        OffsetsBackup.from_bytes(data, where=BACKUP_KEY)
    assert f"consumer offsets backup {BACKUP_KEY} is unreadable" in str(info.value)
    assert what in str(info.value)


def test_only_the_topics_own_configs_are_kept_and_never_a_sensitive_one() -> None:
    def entry(name: str, value: str | None, source: ConfigSource, sensitive: bool) -> ConfigEntry:
        return ConfigEntry(
            name=name, value=value, read_only=False, source=source, is_sensitive=sensitive
        )

    entries = [
        entry("retention.ms", "604800000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
        entry("remote.storage.enable", "true", ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
        entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG, False),
        entry("min.insync.replicas", "2", ConfigSource.STATIC_BROKER_CONFIG, False),
        entry("secret.token", "hunter2", ConfigSource.DYNAMIC_TOPIC_CONFIG, True),
        entry("redacted.thing", None, ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
    ]
    configs = topic_configs(entries)
    assert configs == {"retention.ms": "604800000", "remote.storage.enable": "true"}
    data = TopicManifest(
        topic="orders",
        topic_id=TOPIC_ID,
        partition_count=1,
        replication_factor=1,
        configs=configs,
        partitions=(
            PartitionRemoteLog(
                partition=0,
                remote_log_start_offset=None,
                remote_log_end_offset=None,
                remote_segments=0,
                remote_bytes=0,
            ),
        ),
        written_at_ms=0,
    ).to_bytes()
    assert b"secret.token" not in data and b"hunter2" not in data
