"""LocalTieredStorage and the remote object keys: copy, ranged fetch, indexes, delete."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import InvalidConfigError, KafkaStorageError
from storage_core.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointFile
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
    partition_key_prefix,
    segment_key,
    segment_keys,
)
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteObjectStore,
    RemoteObjectStoreNotSupportedError,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStorageManager,
    remote_object_store,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.conftest import make_batch

TOPIC_ID = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDEF)
SEGMENT_ID = Uuid(-5, 42)


def ref(segment_id: Uuid = SEGMENT_ID, start_offset: int = 0) -> RemoteSegmentRef:
    return RemoteSegmentRef(
        topic="my-topic.v1",
        topic_id=TOPIC_ID,
        partition=3,
        segment_id=segment_id,
        start_offset=start_offset,
    )


@pytest.fixture
def segment_data(tmp_path: Path) -> LogSegmentData:
    """The files of a real closed segment (offsets 0..29) of a log with a producer."""
    log = Log(tmp_path / "my-topic.v1-3", LogConfig())
    try:
        for i in range(3):
            log.append_as_leader(
                make_batch(
                    10,
                    value_size=200,
                    tag=f"b{i}",
                    producer_id=7,
                    producer_epoch=0,
                    base_sequence=10 * i,
                ),
                leader_epoch=i,
            )
        log.roll()
        closed = log.segments[0]
        snapshot = log.fetch_producer_snapshot(30)
        assert snapshot is not None
        epochs = tmp_path / "epochs"
        LeaderEpochCheckpointFile(epochs).write([EpochEntry(0, 0), EpochEntry(1, 10)])
        return LogSegmentData(
            log_segment=closed.log.path,
            offset_index=closed.offset_index.path,
            time_index=closed.time_index.path,
            producer_snapshot=snapshot,
            leader_epoch_index=epochs.read_bytes(),
        )
    finally:
        log.close()


@pytest.fixture
def storage(tmp_path: Path) -> LocalTieredStorage:
    return LocalTieredStorage(tmp_path / "remote", prefix="tiered/")


# -- keys -------------------------------------------------------------------------------------


def test_keys_follow_the_documented_layout() -> None:
    keys = segment_keys("tiered", ref(start_offset=4200))
    base = f"tiered/my-topic.v1-{TOPIC_ID}/3/00000000000000004200-{SEGMENT_ID}"
    assert keys == {
        RemoteObjectSuffix.LOG: base + ".log",
        RemoteObjectSuffix.OFFSET_INDEX: base + ".index",
        RemoteObjectSuffix.TIME_INDEX: base + ".timeindex",
        RemoteObjectSuffix.PRODUCER_SNAPSHOT: base + ".snapshot",
        RemoteObjectSuffix.TRANSACTION_INDEX: base + ".txnindex",
        RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT: base + ".leader-epoch-checkpoint",
        RemoteObjectSuffix.SEGMENT_MANIFEST: base + ".rsm-manifest",
    }
    # No prefix: the key starts at the topic directory; slashes around a prefix do not matter.
    assert segment_key("", ref(), RemoteObjectSuffix.LOG).startswith(f"my-topic.v1-{TOPIC_ID}/3/")
    assert segment_key("/a/b/", ref(), RemoteObjectSuffix.LOG).startswith("a/b/my-topic.v1-")
    assert partition_key_prefix("p", ref().topic_id_partition) == f"p/my-topic.v1-{TOPIC_ID}/3/"


@pytest.mark.parametrize("prefix", ["", "tiered", "a/b"])
@pytest.mark.parametrize("suffix", list(RemoteObjectSuffix))
def test_keys_parse_back_to_the_segment(prefix: str, suffix: RemoteObjectSuffix) -> None:
    # Ids whose text contains '-' and '_' next to a topic name containing '-'.
    for _ in range(20):
        segment = RemoteSegmentRef(
            topic="a-b-c",
            topic_id=Uuid.from_string("-_-_-_-_-_-_-_-_-_-_-w"),
            partition=12,
            segment_id=Uuid.random(),
            start_offset=2**63 - 1,
        )
        parsed = parse_object_key(segment_key(prefix, segment, suffix), prefix)
        assert parsed.segment == segment
        assert parsed.suffix is suffix


@pytest.mark.parametrize(
    "key",
    [
        "other/my-topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log",
        "tiered/my-topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.tmp",
        "tiered/my-topic-AAAAAAAAAAAAAAAAAAAAAA/x/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log",
        "tiered/my-topic-AAAAAAAAAAAAAAAAAAAAAA/0/0000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log",
        "tiered/my-topic/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log",
        "tiered/my-topic-AAAAAAAAAAAAAAAAAAAAAA/0/extra/00000000000000000000-x.log",
        "tiered/my-topic-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.log.1",
    ],
)
def test_foreign_keys_are_rejected(key: str) -> None:
    with pytest.raises(InvalidRemoteObjectKeyError):
        parse_object_key(key, "tiered")


def test_segment_ref_from_any_metadata_object() -> None:
    @dataclass(frozen=True)
    class SegmentId:
        topic_id_partition: TopicIdPartition
        id: Uuid

    @dataclass(frozen=True)
    class Metadata:
        remote_log_segment_id: SegmentId
        start_offset: int
        end_offset: int

    metadata = Metadata(
        SegmentId(TopicIdPartition(TOPIC_ID, TopicPartition("my-topic.v1", 3)), SEGMENT_ID),
        start_offset=0,
        end_offset=29,
    )
    assert RemoteSegmentRef.of(metadata) == ref()
    assert RemoteSegmentRef.of(ref()).remote_log_segment_id.id == SEGMENT_ID
    with pytest.raises(ValueError, match="start offset"):
        RemoteSegmentRef(
            topic="t", topic_id=TOPIC_ID, partition=0, segment_id=SEGMENT_ID, start_offset=-1
        )


# -- LocalTieredStorage -----------------------------------------------------------------------


def test_is_a_remote_storage_manager(storage: LocalTieredStorage) -> None:
    assert isinstance(storage, RemoteStorageManager)


def test_copy_then_fetch_every_file(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    assert storage.copy_log_segment_data(ref(), segment_data) is None

    log_bytes = segment_data.log_segment.read_bytes()
    with storage.fetch_log_segment(ref(), 0) as stream:
        assert stream.read() == log_bytes
    expected = {
        IndexType.OFFSET: segment_data.offset_index.read_bytes(),
        IndexType.TIMESTAMP: segment_data.time_index.read_bytes(),
        IndexType.PRODUCER_SNAPSHOT: segment_data.producer_snapshot.read_bytes(),  # type: ignore[union-attr]
        IndexType.LEADER_EPOCH: segment_data.leader_epoch_index,
    }
    for index_type, content in expected.items():
        with storage.fetch_index(ref(), index_type) as stream:
            assert stream.read() == content, index_type
    # The segment had no aborted transactions: no transaction index was uploaded.
    with pytest.raises(RemoteResourceNotFoundError):
        storage.fetch_index(ref(), IndexType.TRANSACTION)
    # The files sit under the documented keys.
    key = segment_key("tiered", ref(), RemoteObjectSuffix.LOG)
    assert (storage.storage_dir / key).read_bytes() == log_bytes


def test_ranged_fetches_are_inclusive(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    storage.copy_log_segment_data(ref(), segment_data)
    data = segment_data.log_segment.read_bytes()
    size = len(data)
    for start, end in [(0, 0), (0, 60), (61, 300), (100, size - 1), (size - 1, None), (5, 10**9)]:
        with storage.fetch_log_segment(ref(), start, end) as stream:
            assert stream.read() == data[start : None if end is None else end + 1], (start, end)
    with storage.fetch_log_segment(ref(), 10, 20) as stream:
        assert stream.read(4) == data[10:14]
        assert stream.read(100) == data[14:21]
        assert stream.read() == b""
    with pytest.raises(RemoteStorageError, match="beyond"):
        storage.fetch_log_segment(ref(), size)
    with pytest.raises(ValueError):
        storage.fetch_log_segment(ref(), 10, 9)
    with pytest.raises(ValueError):
        storage.fetch_log_segment(ref(), -1)


def test_copy_is_idempotent_and_leaves_no_temp_files(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    storage.copy_log_segment_data(ref(), segment_data)
    first = {p: p.read_bytes() for p in storage.storage_dir.rglob("*") if p.is_file()}
    storage.copy_log_segment_data(ref(), segment_data)
    second = {p: p.read_bytes() for p in storage.storage_dir.rglob("*") if p.is_file()}
    assert first == second
    assert len(first) == 5  # log, index, timeindex, snapshot, leader-epoch-checkpoint
    assert not [p for p in first if p.name.endswith(".tmp")]


def test_two_copies_of_one_segment_do_not_collide(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    other = ref(segment_id=Uuid(1, 2))
    storage.copy_log_segment_data(ref(), segment_data)
    storage.copy_log_segment_data(other, segment_data)
    storage.delete_log_segment_data(ref())
    with pytest.raises(RemoteResourceNotFoundError):
        storage.fetch_log_segment(ref(), 0)
    with storage.fetch_log_segment(other, 0) as stream:
        assert stream.read() == segment_data.log_segment.read_bytes()


def test_delete_is_idempotent_and_removes_interrupted_copies(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    storage.delete_log_segment_data(ref())  # nothing there yet: fine
    storage.copy_log_segment_data(ref(), segment_data)
    log_path = storage.storage_dir / segment_key("tiered", ref(), RemoteObjectSuffix.LOG)
    leftover = log_path.with_name(log_path.name + ".0123456789abcdef.tmp")
    leftover.write_bytes(b"half a copy")
    storage.delete_log_segment_data(ref())
    storage.delete_log_segment_data(ref())
    assert [p for p in storage.storage_dir.rglob("*") if p.is_file()] == []
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            storage.fetch_index(ref(), index_type)


def test_a_deletion_cut_short_leaves_objects_without_their_manifest(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    """The manifest goes first: what a failed deletion leaves is never described as whole."""
    manifest = b'{"format":"chunked"}'
    storage.copy_log_segment_data(
        ref(),
        LogSegmentData(
            log_segment=segment_data.log_segment,
            offset_index=segment_data.offset_index,
            time_index=segment_data.time_index,
            segment_manifest=manifest,
        ),
    )
    assert storage.fetch_segment_manifest(ref()) == manifest
    log_path = storage.storage_dir / segment_key("tiered", ref(), RemoteObjectSuffix.LOG)
    log_path.unlink()
    log_path.mkdir()  # unlink fails on it: the deletion stops there
    with pytest.raises(RemoteStorageError, match=r"deleting remote segment"):
        storage.delete_log_segment_data(ref())
    assert storage.fetch_segment_manifest(ref()) is None
    left = {parse_object_key(i.key, storage.prefix).suffix for i in storage.list_objects()}
    assert RemoteObjectSuffix.SEGMENT_MANIFEST not in left
    assert RemoteObjectSuffix.OFFSET_INDEX in left


def test_copy_of_a_missing_file_fails_with_a_storage_error(
    storage: LocalTieredStorage, segment_data: LogSegmentData, tmp_path: Path
) -> None:
    broken = LogSegmentData(
        log_segment=segment_data.log_segment,
        offset_index=tmp_path / "missing.index",
        time_index=segment_data.time_index,
    )
    with pytest.raises(RemoteStorageError, match=r"missing\.index") as info:
        storage.copy_log_segment_data(ref(), broken)
    assert isinstance(info.value, KafkaStorageError)
    assert info.value.error_code == "kafka_storage_error"
    assert not [p for p in storage.storage_dir.rglob("*.tmp")]
    # The caller cleans up the partial copy.
    storage.delete_log_segment_data(ref())
    assert [p for p in storage.storage_dir.rglob("*") if p.is_file()] == []


def test_list_objects_maps_back_to_segments(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    storage.copy_log_segment_data(ref(), segment_data)
    storage.copy_log_segment_data(ref(segment_id=Uuid(1, 2), start_offset=30), segment_data)
    (storage.storage_dir / "tiered" / "stray.tmp").write_bytes(b"")
    infos = list(storage.list_objects())
    assert len(infos) == 10
    assert [i.key for i in infos] == sorted(i.key for i in infos)
    parsed = [parse_object_key(i.key, storage.prefix) for i in infos]
    assert {p.segment for p in parsed} == {ref(), ref(segment_id=Uuid(1, 2), start_offset=30)}
    log_info = next(i for i, p in zip(infos, parsed, strict=True) if p.suffix.value == "log")
    assert log_info.size_bytes == segment_data.log_segment.stat().st_size
    only_partition = partition_key_prefix("tiered", ref().topic_id_partition)
    assert len(list(storage.list_objects(only_partition))) == 10
    assert list(storage.list_objects("tiered/nothing-here/")) == []


def test_delete_objects_deletes_keys_and_accepts_keys_already_gone(
    storage: LocalTieredStorage, segment_data: LogSegmentData
) -> None:
    assert isinstance(storage, RemoteObjectStore)
    storage.copy_log_segment_data(ref(), segment_data)
    kept = ref(segment_id=Uuid(1, 2), start_offset=30)
    storage.copy_log_segment_data(kept, segment_data)
    doomed = [
        i.key for i in storage.list_objects() if parse_object_key(i.key, "tiered").segment == ref()
    ]
    assert len(doomed) == 5
    missing = segment_key("tiered", ref(segment_id=Uuid(9, 9)), RemoteObjectSuffix.LOG)
    storage.delete_objects([*doomed, missing])
    storage.delete_objects(doomed)  # again: already gone is fine
    left = {parse_object_key(i.key, "tiered").segment for i in storage.list_objects()}
    assert left == {kept}


@pytest.mark.parametrize(
    "bad_key",
    [
        "../outside",
        "other-prefix/my-topic.v1-AAAAAAAAAAAAAAAAAAAAAA/3/x.log",
        "tiered/stray.txt",
        "tiered/../../outside",
        "",
    ],
)
def test_delete_objects_refuses_a_batch_with_a_key_that_is_not_ours(
    storage: LocalTieredStorage, segment_data: LogSegmentData, tmp_path: Path, bad_key: str
) -> None:
    storage.copy_log_segment_data(ref(), segment_data)
    (tmp_path / "outside").write_bytes(b"not remote data")
    (storage.storage_dir / "tiered" / "stray.txt").write_bytes(b"someone else's")
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    ours = segment_key("tiered", ref(), RemoteObjectSuffix.LOG)
    with pytest.raises(InvalidRemoteObjectKeyError, match="nothing was deleted") as info:
        storage.delete_objects([ours, bad_key])
    assert repr(bad_key) in str(info.value) and str(storage.storage_dir) in str(info.value)
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before


def test_a_store_without_listing_is_named_with_what_needed_it(
    storage: LocalTieredStorage,
) -> None:
    class CopyOnly:
        def copy_log_segment_data(self, *args: object) -> None: ...
        def fetch_log_segment(self, *args: object) -> None: ...
        def fetch_index(self, *args: object) -> None: ...
        def delete_log_segment_data(self, *args: object) -> None: ...
        def close(self) -> None: ...

    assert remote_object_store(storage, "reconcile") is storage
    with pytest.raises(RemoteObjectStoreNotSupportedError, match=r"reconcile needs .*CopyOnly"):
        remote_object_store(CopyOnly(), "reconcile")  # type: ignore[arg-type]


def test_from_config(tmp_path: Path) -> None:
    storage = LocalTieredStorage.from_config(
        {"rsm.config.local.storage.dir": str(tmp_path / "r"), "rsm.config.local.key.prefix": "x"}
    )
    assert storage.storage_dir == tmp_path / "r"
    assert storage.prefix == "x"
    with pytest.raises(ValueError, match=r"local\.storage\.dir"):
        LocalTieredStorage.from_config({})


def test_load_remote_storage_manager_by_class_name(tmp_path: Path) -> None:
    config = {"rsm.config.local.storage.dir": str(tmp_path / "r")}
    for name in (
        "",
        "LocalTieredStorage",
        "storage_core.tiered.local_tiered_storage.LocalTieredStorage",
    ):
        manager = load_remote_storage_manager(name, config)
        # New copies are chunked: the store comes wrapped in the chunked format.
        assert isinstance(manager, ChunkedRemoteStorageManager)
        assert isinstance(manager.store, LocalTieredStorage)
        assert manager.store.storage_dir == tmp_path / "r"
    with pytest.raises(InvalidConfigError, match="no importable class"):
        load_remote_storage_manager("no.such.Manager", config)
    with pytest.raises(InvalidConfigError, match="local"):
        load_remote_storage_manager("LocalTieredStorage", {})
    with pytest.raises(InvalidConfigError, match="from_config"):
        load_remote_storage_manager("pathlib.Path", config)
