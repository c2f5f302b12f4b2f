"""The bucket manifest keys (topic manifests, consumer offsets backups) and the whole-object
calls of LocalTieredStorage (put_object, get_object), also through the chunked manager."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_core.common import Uuid
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.format_config import ChunkedFormatConfig
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    OffsetsBackupKey,
    RemoteObjectSuffix,
    TopicManifestKey,
    offsets_backup_key,
    offsets_backups_prefix,
    parse_object_key,
    parse_offsets_backup_key,
    parse_topic_manifest_key,
    segment_key,
    topic_manifest_key,
)
from storage_core.tiered.remote_storage_manager import (
    RemoteObjectStore,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
)

TOPIC_ID = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDEF)
TAKEN_AT_MS = 1_764_454_800_000


def test_topic_manifest_key_round_trips_with_and_without_prefix() -> None:
    key = topic_manifest_key("tiered/", "orders.v1", TOPIC_ID)
    assert key == f"tiered/orders.v1-{TOPIC_ID}/topic-manifest.json"
    assert parse_topic_manifest_key(key, "tiered") == TopicManifestKey(
        topic="orders.v1", topic_id=TOPIC_ID
    )
    bare = topic_manifest_key("", "orders.v1", TOPIC_ID)
    assert bare == f"orders.v1-{TOPIC_ID}/topic-manifest.json"
    assert parse_topic_manifest_key(bare).topic_id == TOPIC_ID


def test_offsets_backup_key_has_20_digits_and_sorts_by_time() -> None:
    key = offsets_backup_key("tiered", TAKEN_AT_MS)
    assert key == "tiered/_consumer-offsets/00000001764454800000.json"
    assert key.startswith(offsets_backups_prefix("tiered"))
    assert parse_offsets_backup_key(key, "tiered") == OffsetsBackupKey(taken_at_ms=TAKEN_AT_MS)
    keys = [offsets_backup_key("tiered", ms) for ms in (9, 10, 1_000, TAKEN_AT_MS)]
    assert sorted(keys) == keys
    with pytest.raises(ValueError, match="taken_at_ms"):
        offsets_backup_key("tiered", -1)


@pytest.mark.parametrize(
    "key",
    [
        f"tiered/orders-{TOPIC_ID}/0/00000000000000000000-{TOPIC_ID}.log",  # a segment object
        f"tiered/orders-{TOPIC_ID}/topic-manifest.txt",
        f"other/orders-{TOPIC_ID}/topic-manifest.json",
        "tiered/orders/topic-manifest.json",  # no topic id
        "tiered/_consumer-offsets/topic-manifest.json",
        "tiered/_consumer-offsets/1764454800000.json",  # not 20 digits
        "tiered/_consumer-offsets/0000000176445480000x.json",
        "tiered/_consumer-offsets/00000001764454800000.json.tmp",
        "tiered/_consumer-offsets/x/00000001764454800000.json",
    ],
)
def test_other_keys_are_neither_kind(key: str) -> None:
    with pytest.raises(InvalidRemoteObjectKeyError):
        parse_topic_manifest_key(key, "tiered")
    with pytest.raises(InvalidRemoteObjectKeyError):
        parse_offsets_backup_key(key, "tiered")


def test_bucket_manifest_keys_are_not_segment_objects() -> None:
    for key in (
        topic_manifest_key("tiered", "orders", TOPIC_ID),
        offsets_backup_key("tiered", TAKEN_AT_MS),
    ):
        with pytest.raises(InvalidRemoteObjectKeyError):
            parse_object_key(key, "tiered")


@pytest.fixture
def storage(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(tmp_path / "remote", prefix="tiered")


def test_put_then_get_replaces_the_whole_object(storage: LocalTieredStorage) -> None:
    assert isinstance(storage, RemoteObjectStore)
    key = topic_manifest_key("tiered", "orders", TOPIC_ID)
    with pytest.raises(RemoteResourceNotFoundError, match="does not exist"):
        storage.get_object(key)
    storage.put_object(key, b'{"version": 1, "old": true}')
    storage.put_object(key, b'{"version": 1}')
    assert storage.get_object(key) == b'{"version": 1}'
    directory = storage.storage_dir / key.rpartition("/")[0]
    assert sorted(os.listdir(directory)) == ["topic-manifest.json"]  # no temp file left
    assert [info.key for info in storage.list_objects()] == [key]


def test_backups_are_listed_under_their_prefix_and_deleted_by_key(
    storage: LocalTieredStorage,
) -> None:
    keys = [offsets_backup_key("tiered", ms) for ms in (1, 2, 3)]
    for key in keys:
        storage.put_object(key, b"{}")
    storage.put_object(topic_manifest_key("tiered", "orders", TOPIC_ID), b"{}")
    listed = [i.key for i in storage.list_objects(offsets_backups_prefix("tiered"))]
    assert listed == keys
    storage.delete_objects(keys[:2])
    assert [i.key for i in storage.list_objects(offsets_backups_prefix("tiered"))] == keys[2:]


def test_a_deleted_topics_manifest_is_deleted_by_key_and_a_foreign_key_is_not(
    storage: LocalTieredStorage,
) -> None:
    """The partition deletion job removes a deleted topic's manifest with its remote data;
    a key that is no object of the tier still refuses the whole batch."""
    key = topic_manifest_key("tiered", "orders", TOPIC_ID)
    storage.put_object(key, b"{}")
    foreign = storage.storage_dir / "tiered" / "notes.txt"
    foreign.write_bytes(b"kept")
    with pytest.raises(InvalidRemoteObjectKeyError, match="nothing was deleted"):
        storage.delete_objects([key, "tiered/notes.txt"])
    assert storage.get_object(key) == b"{}"
    storage.delete_objects([key])
    with pytest.raises(RemoteResourceNotFoundError):
        storage.get_object(key)
    assert foreign.read_bytes() == b"kept"


@pytest.mark.parametrize(
    "key",
    [
        segment_key(
            "tiered",
            RemoteSegmentRef(
                topic="orders", topic_id=TOPIC_ID, partition=0, segment_id=TOPIC_ID, start_offset=0
            ),
            RemoteObjectSuffix.LOG,
        ),
        "tiered/notes.txt",
        "../outside.json",
        f"orders-{TOPIC_ID}/topic-manifest.json",  # outside the prefix
    ],
)
def test_put_and_get_refuse_any_other_key(storage: LocalTieredStorage, key: str) -> None:
    with pytest.raises(InvalidRemoteObjectKeyError, match="neither a topic manifest") as info:
        storage.put_object(key, b"x")
    assert repr(key) in str(info.value)
    with pytest.raises(InvalidRemoteObjectKeyError, match="neither a topic manifest"):
        storage.get_object(key)
    assert list(storage.list_objects()) == []
    assert not (storage.storage_dir.parent / "outside.json").exists()


def test_the_chunked_manager_forwards_to_its_store(storage: LocalTieredStorage) -> None:
    chunked = ChunkedRemoteStorageManager(storage, ChunkedFormatConfig())
    key = offsets_backup_key("tiered", TAKEN_AT_MS)
    chunked.put_object(key, b'{"format": "consumer-offsets"}')
    assert storage.get_object(key) == b'{"format": "consumer-offsets"}'  # stored as given
    assert chunked.get_object(key) == b'{"format": "consumer-offsets"}'
    with pytest.raises(InvalidRemoteObjectKeyError):
        chunked.put_object("tiered/notes.txt", b"x")
    chunked.close()
