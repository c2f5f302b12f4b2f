"""The chunked format on S3: moto's S3 server over HTTP on 127.0.0.1 (the ``s3`` fixture),
the manager built from ``rsm.config.*`` settings as a broker builds it. Every combination of
chunk size, compression and encryption reads back byte for byte; key rotation; plain objects
copied by the bare ``S3RemoteStorageManager``; what a bucket reader without the key sees; and
faults of the store (a chunk corrupted, an object cut short, a manifest or an index object
gone, the store stopped or hanging in the middle of a read), each a ``RemoteStorageError``
naming the segment, never a wrong byte."""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.errors import (
    ChunkIntegrityError,
    MissingEncryptionKeyError,
    SegmentManifestError,
)
from storage_core.tiered.chunked.segment_manifest import SegmentDescription
from storage_core.tiered.recovery.bucket_inventory import scan_bucket
from storage_core.tiered.recovery.restore import restored_metadata
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_key
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.chunked_support import (
    MARKER,
    closed_segment,
    closed_segment_metadata,
    encryption_settings,
    segment_ref,
    write_key_pair,
)
from tests.s3_server import BUCKET, S3Server

PREFIX = "cluster-a/tiered"
CHUNK_SIZE = 1000  # of the fault tests: about 26 chunks
# 1000 bytes is less than a batch (10 records of ~300 bytes); a cold read costs a GET a chunk.
COMBINATIONS = list(itertools.product((1000, 4096, 4 * 1024 * 1024), (False, True), (False, True)))

Chunked = Callable[..., ChunkedRemoteStorageManager]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    directory = tmp_path_factory.mktemp("keys")
    return {key_id: write_key_pair(directory, key_id) for key_id in ("k1", "k2")}


@pytest.fixture(scope="module")
def segment_data(tmp_path_factory: pytest.TempPathFactory) -> LogSegmentData:
    """A real closed segment (about 26 KB) with a transaction index; shared, never changed."""
    directory = tmp_path_factory.mktemp("segment")
    data = closed_segment(directory)
    txn_index = directory / "00000000000000000000.txnindex"
    txn_index.write_bytes(os.urandom(34))  # one entry's worth: stored as given
    return LogSegmentData(
        log_segment=data.log_segment,
        offset_index=data.offset_index,
        time_index=data.time_index,
        producer_snapshot=data.producer_snapshot,
        transaction_index=txn_index,
        leader_epoch_index=data.leader_epoch_index,
    )


def store_settings(s3: S3Server) -> dict[str, str]:
    return {
        "rsm.config.s3.bucket.name": BUCKET,
        "rsm.config.s3.key.prefix": PREFIX,
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
        "rsm.config.s3.retry.max.attempts": "2",
        "rsm.config.s3.retry.backoff.ms": "20",
        "rsm.config.s3.retry.backoff.max.ms": "100",
    }


@pytest.fixture
def chunked(s3: S3Server) -> Iterator[Chunked]:
    """Builds managers as a broker does (``load_remote_storage_manager``); closes them after."""
    managers: list[ChunkedRemoteStorageManager] = []

    def build(**settings: str) -> ChunkedRemoteStorageManager:
        manager = load_remote_storage_manager(
            "S3RemoteStorageManager", {**store_settings(s3), **settings}
        )
        assert isinstance(manager, ChunkedRemoteStorageManager)
        assert isinstance(manager.store, S3RemoteStorageManager)
        managers.append(manager)
        return manager

    yield build
    for manager in managers:
        manager.close()


def key_of(segment: RemoteSegmentRef, suffix: RemoteObjectSuffix) -> str:
    return segment_key(PREFIX, segment, suffix)


def get_object(s3: S3Server, key: str) -> bytes:
    return bytes(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())


def put_object(s3: S3Server, key: str, body: bytes) -> None:
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=body)


def read_all(
    manager: ChunkedRemoteStorageManager, segment: Any, start: int = 0, end: int | None = None
) -> bytes:
    with manager.fetch_log_segment(segment, start, end) as stream:
        return stream.read()


def read_index(manager: ChunkedRemoteStorageManager, segment: Any, index_type: IndexType) -> bytes:
    with manager.fetch_index(segment, index_type) as stream:
        return stream.read()


def format_settings(
    keys: dict[str, dict[str, str]], *, chunk_size: int, compression: bool, encryption: bool
) -> dict[str, str]:
    return {
        "rsm.config.chunk.size": str(chunk_size),
        "rsm.config.compression.enabled": str(compression).lower(),
        **(encryption_settings(keys, "k1") if encryption else {}),
    }


def names_segment(error: pytest.ExceptionInfo[BaseException], segment: RemoteSegmentRef) -> bool:
    return str(segment.segment_id) in str(error.value)


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(("chunk_size", "compression", "encryption"), COMBINATIONS)
def test_every_combination_reads_back_byte_for_byte(
    s3: S3Server,
    chunked: Chunked,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    chunk_size: int,
    compression: bool,
    encryption: bool,
) -> None:
    original = segment_data.log_segment.read_bytes()
    first_batch_size = 12 + int.from_bytes(original[8:12], "big")  # offset, length, the rest
    assert chunk_size != 1000 or chunk_size < first_batch_size
    settings = format_settings(
        keys, chunk_size=chunk_size, compression=compression, encryption=encryption
    )
    segment = segment_ref()
    assert chunked(**settings).copy_log_segment_data(segment, segment_data) is not None

    reader = chunked(**settings)  # a fresh reader: nothing cached
    manifest = reader.segment_manifest(segment)
    assert manifest is not None
    index = manifest.chunk_index
    assert index.original_size == len(original)
    assert len(index) == -(-len(original) // chunk_size)
    assert manifest.compression is compression
    assert (manifest.encryption is not None) is encryption
    size = len(original)
    for start, end in [
        (0, None),
        (0, size - 1),
        (1, 1),
        (99, 100),
        (size // 2, None),
        (size - 1, None),
        (size - 1, size + 100),
        (37, size // 3),
        (4095, 4097),
    ]:
        expected = original[start : None if end is None else end + 1]
        assert read_all(reader, segment, start, end) == expected, (start, end)
    with reader.fetch_log_segment(segment, 0) as stream:  # in pieces across chunk boundaries
        pieces = []
        while piece := stream.read(777):
            pieces.append(piece)
    assert b"".join(pieces) == original
    for index_type, path in [
        (IndexType.OFFSET, segment_data.offset_index),
        (IndexType.TIMESTAMP, segment_data.time_index),
        (IndexType.PRODUCER_SNAPSHOT, segment_data.producer_snapshot),
        (IndexType.TRANSACTION, segment_data.transaction_index),
    ]:
        assert path is not None
        assert read_index(reader, segment, index_type) == path.read_bytes(), index_type
    assert read_index(reader, segment, IndexType.LEADER_EPOCH) == segment_data.leader_epoch_index

    # What the bucket holds: the chunks one after the other, as the manifest says.
    stored_log = get_object(s3, key_of(segment, RemoteObjectSuffix.LOG))
    assert len(stored_log) == index.stored_size
    if compression and chunk_size >= 4096:
        assert len(stored_log) < size // 2  # the record values repeat
    if not compression and not encryption:
        assert stored_log == original  # chunking alone changes no byte
    else:
        assert stored_log != original


def test_key_rotation_keeps_old_segments_readable_and_a_missing_key_is_named(
    chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    original = segment_data.log_segment.read_bytes()
    old, new = segment_ref(), segment_ref()
    chunked(**encryption_settings({"k1": keys["k1"]}, "k1")).copy_log_segment_data(
        old, segment_data
    )
    chunked(**encryption_settings(keys, "k2")).copy_log_segment_data(new, segment_data)

    rotated = chunked(**encryption_settings(keys, "k2"))  # k2 active, k1 still in the ring
    for segment, key_id in ((old, "k1"), (new, "k2")):
        manifest = rotated.segment_manifest(segment)
        assert manifest is not None and manifest.encryption is not None
        assert manifest.encryption.wrapped_data_key.key_id == key_id
        assert read_all(rotated, segment) == original
        assert (
            read_index(rotated, segment, IndexType.OFFSET) == segment_data.offset_index.read_bytes()
        )

    without_k1 = chunked(**encryption_settings({"k2": keys["k2"]}, "k2"))
    assert read_all(without_k1, new) == original
    with pytest.raises(MissingEncryptionKeyError, match="'k1'") as e:
        without_k1.fetch_log_segment(old, 0)
    assert "rsm.config.encryption.key.pairs.k1.private.key.file" in str(e.value)
    assert names_segment(e, old)
    with pytest.raises(MissingEncryptionKeyError, match="'k2'"):
        chunked().fetch_log_segment(new, 0)


def test_plain_objects_copied_by_the_bare_manager_read_through_the_chunked_one(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    """A tier copied before the chunked format: the bare ``S3RemoteStorageManager`` wrote the
    files as they are and no manifest; the chunked manager reads them beside chunked ones."""
    original = segment_data.log_segment.read_bytes()
    plain, sealed = segment_ref(), segment_ref()
    bare = S3RemoteStorageManager.from_config(store_settings(s3))
    try:
        assert bare.copy_log_segment_data(plain, segment_data) is None
    finally:
        bare.close()
    settings = format_settings(keys, chunk_size=CHUNK_SIZE, compression=True, encryption=True)
    chunked(**settings).copy_log_segment_data(sealed, segment_data)
    assert get_object(s3, key_of(plain, RemoteObjectSuffix.LOG)) == original

    reader = chunked(**settings)
    assert reader.segment_manifest(plain) is None
    assert reader.segment_manifest(sealed) is not None
    for segment in (plain, sealed):
        assert read_all(reader, segment) == original
        assert read_all(reader, segment, 5, 2500) == original[5:2501]
        assert read_all(reader, segment, len(original) - 1) == original[-1:]
        assert (
            read_index(reader, segment, IndexType.OFFSET) == segment_data.offset_index.read_bytes()
        )
        assert read_index(reader, segment, IndexType.LEADER_EPOCH) == (
            segment_data.leader_epoch_index
        )


def bucket_objects(s3: S3Server) -> dict[str, bytes]:
    """Every object of the bucket, as anyone with read access to it gets them."""
    client = s3.client()
    objects = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for listed in page.get("Contents", []):
            objects[listed["Key"]] = get_object(s3, listed["Key"])
    return objects


def test_a_bucket_reader_without_the_key_sees_no_record_bytes(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    original = segment_data.log_segment.read_bytes()
    markers = original.count(MARKER)
    assert markers >= 80  # in every record's value
    for compression in (False, True):
        chunked(
            **format_settings(keys, chunk_size=CHUNK_SIZE, compression=compression, encryption=True)
        ).copy_log_segment_data(segment_ref(), segment_data)

    objects = bucket_objects(s3)
    suffixes = sorted(key.rsplit(".", 1)[1] for key in objects)
    assert suffixes == sorted(2 * [suffix.value for suffix in RemoteObjectSuffix])
    for key, content in objects.items():
        assert MARKER not in content, key
    index_bytes = segment_data.offset_index.read_bytes()
    for key, content in objects.items():
        if key.endswith(".index"):
            assert index_bytes not in content, key  # offsets and positions are sealed too
    # The same grep finds the records of a segment copied without encryption.
    chunked(
        **format_settings(keys, chunk_size=CHUNK_SIZE, compression=False, encryption=False)
    ).copy_log_segment_data(segment_ref(), segment_data)
    assert sum(content.count(MARKER) for content in bucket_objects(s3).values()) == markers


# -- faults -----------------------------------------------------------------------------------


def copy_for_faults(
    chunked: Chunked,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    *,
    compression: bool = False,
    encryption: bool = False,
) -> tuple[RemoteSegmentRef, bytes | None, dict[str, str]]:
    settings = format_settings(
        keys, chunk_size=CHUNK_SIZE, compression=compression, encryption=encryption
    )
    segment = segment_ref()
    custom_metadata = chunked(**settings).copy_log_segment_data(segment, segment_data)
    return segment, custom_metadata, settings


@pytest.mark.parametrize(("compression", "encryption"), [(False, False), (True, True)])
def test_a_chunk_corrupted_in_the_bucket_is_never_served(
    s3: S3Server,
    chunked: Chunked,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    compression: bool,
    encryption: bool,
) -> None:
    original = segment_data.log_segment.read_bytes()
    segment, _, settings = copy_for_faults(
        chunked, keys, segment_data, compression=compression, encryption=encryption
    )
    reader = chunked(**settings)
    manifest = reader.segment_manifest(segment)
    assert manifest is not None
    bad = manifest.chunk_index.chunk(3)
    log_key = key_of(segment, RemoteObjectSuffix.LOG)
    stored = bytearray(get_object(s3, log_key))
    stored[bad.stored_position + bad.stored_size // 2] ^= 0x01
    put_object(s3, log_key, bytes(stored))

    with reader.fetch_log_segment(segment, 0) as stream:
        assert stream.read(bad.original_position) == original[: bad.original_position]
        with pytest.raises(ChunkIntegrityError, match=r"chunk 3 \(original bytes 3000-3999\)") as e:
            stream.read(1)
    assert names_segment(e, segment)
    with pytest.raises(ChunkIntegrityError):
        read_all(reader, segment, bad.original_position + 1, bad.original_position + 1)
    assert read_all(reader, segment, bad.original_end) == original[bad.original_end :]


def test_an_object_cut_short_in_the_bucket(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    original = segment_data.log_segment.read_bytes()
    segment, _, settings = copy_for_faults(chunked, keys, segment_data, encryption=True)
    reader = chunked(**settings)
    manifest = reader.segment_manifest(segment)
    assert manifest is not None
    cut = manifest.chunk_index.chunk(5)
    log_key = key_of(segment, RemoteObjectSuffix.LOG)
    put_object(s3, log_key, get_object(s3, log_key)[: cut.stored_position + 10])

    with reader.fetch_log_segment(segment, 0) as stream:
        assert stream.read(cut.original_position) == original[: cut.original_position]
        with pytest.raises(ChunkIntegrityError, match=r"chunk 5 .*early") as e:
            stream.read()
    assert names_segment(e, segment)
    with pytest.raises(RemoteStorageError, match="beyond") as e:
        read_all(reader, segment, manifest.chunk_index.chunk(8).original_position)
    assert names_segment(e, segment)

    index_key = key_of(segment, RemoteObjectSuffix.OFFSET_INDEX)
    put_object(s3, index_key, get_object(s3, index_key)[:-1])
    with pytest.raises(ChunkIntegrityError, match=r"\.index: .*CRC32C") as e:
        read_index(reader, segment, IndexType.OFFSET)
    assert names_segment(e, segment)


def test_a_missing_manifest_of_a_segment_whose_metadata_says_chunked_is_refused(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    segment, custom_metadata, settings = copy_for_faults(
        chunked, keys, segment_data, compression=True
    )
    s3.client().delete_object(
        Bucket=BUCKET, Key=key_of(segment, RemoteObjectSuffix.SEGMENT_MANIFEST)
    )
    metadata = WithCustomMetadata(segment, custom_metadata)
    reader = chunked(**settings)
    with pytest.raises(SegmentManifestError, match="manifest object is missing") as e:
        reader.fetch_log_segment(metadata, 0)
    assert names_segment(e, segment)
    with pytest.raises(SegmentManifestError):
        reader.fetch_index(metadata, IndexType.OFFSET)


@pytest.mark.parametrize(
    "index_type", [IndexType.OFFSET, IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT]
)
def test_a_deleted_index_object_is_an_error(
    s3: S3Server,
    chunked: Chunked,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    index_type: IndexType,
) -> None:
    segment, _, settings = copy_for_faults(chunked, keys, segment_data, encryption=True)
    suffix = RemoteObjectSuffix.for_index(index_type)
    s3.client().delete_object(Bucket=BUCKET, Key=key_of(segment, suffix))
    with pytest.raises(RemoteStorageError) as e:
        read_index(chunked(**settings), segment, index_type)
    assert names_segment(e, segment)
    if index_type is not IndexType.OFFSET:  # its absence must not read as "none"
        assert not isinstance(e.value, RemoteResourceNotFoundError)
        assert "manifest lists" in str(e.value)


def test_the_store_stopped_in_the_middle_of_a_read(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    original = segment_data.log_segment.read_bytes()
    segment, _, settings = copy_for_faults(chunked, keys, segment_data, encryption=True)
    reader = chunked(**settings)
    with reader.fetch_log_segment(segment, 0) as stream:
        assert stream.read(2 * CHUNK_SIZE) == original[: 2 * CHUNK_SIZE]
        s3.stop()  # the next test's ``s3`` starts it again, empty
        with pytest.raises(RemoteStorageError, match="reachable") as e:
            stream.read()
    assert names_segment(e, segment)
    assert s3.endpoint_url in str(e.value)


def test_the_store_hanging_in_the_middle_of_a_read(
    s3: S3Server, chunked: Chunked, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    """The server stops answering (its process is suspended: connections are still accepted by
    the kernel): the read fails within the read timeout and the retries, naming the segment."""
    original = segment_data.log_segment.read_bytes()
    segment, _, settings = copy_for_faults(chunked, keys, segment_data, compression=True)
    reader = chunked(**settings, **{"rsm.config.s3.read.timeout.ms": "300"})
    assert s3.process is not None
    with reader.fetch_log_segment(segment, 0) as stream:
        assert stream.read(CHUNK_SIZE) == original[:CHUNK_SIZE]
        os.kill(s3.process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(RemoteStorageError, match="2 attempt") as e:
                stream.read()
        finally:
            os.kill(s3.process.pid, signal.SIGCONT)
    assert names_segment(e, segment)
    assert read_all(reader, segment) == original  # back: the same reader reads it whole


class WithCustomMetadata:
    """Segment metadata as the broker passes it: the segment's id, start and custom
    metadata."""

    def __init__(self, segment: RemoteSegmentRef, custom_metadata: bytes | None) -> None:
        self.remote_log_segment_id = segment.remote_log_segment_id
        self.start_offset = segment.start_offset
        self.custom_metadata = custom_metadata


def test_a_segment_restored_under_another_topic_id_is_copied_inside_the_bucket(
    chunked: Chunked, segment_data: LogSegmentData, keys: dict[str, dict[str, str]]
) -> None:
    """The bucket read back from its manifests alone, the segment copied by CopyObject under
    a new topic id with a manifest of its own, readable and decrypted as the source; the
    source's objects are as they were and a copy onto the source's own keys is refused."""
    manager = chunked(**encryption_settings(keys, "k1"))
    source = segment_ref()
    metadata = closed_segment_metadata(source, segment_data)
    manager.copy_log_segment_data(metadata, segment_data)
    store = manager.store
    assert isinstance(store, S3RemoteStorageManager)
    before = {info.key: info.size_bytes for info in store.list_objects()}

    (found,) = scan_bucket(store, verify_checksums=True).partitions.values()
    (segment,) = found.segments
    assert segment.problems == () and segment.metadata == metadata
    target = TopicIdPartition(Uuid.random(), TopicPartition("restored", 0))
    started = restored_metadata(segment, target, now_ms=1)
    described = dataclasses.replace(
        segment.manifest,
        description=SegmentDescription(metadata=started, leader_epochs=segment.leader_epochs),
    )
    suffixes = [RemoteObjectSuffix.LOG] + [RemoteObjectSuffix(n) for n in described.objects]
    stored = store.restore_segment_objects(
        source, RemoteSegmentRef.of(started), suffixes, described.to_bytes()
    )
    assert stored == segment.stored_bytes - len(segment.manifest.to_bytes()) + len(
        described.to_bytes()
    )
    after = {info.key: info.size_bytes for info in store.list_objects()}
    assert {k: v for k, v in after.items() if k in before} == before
    (copied,) = scan_bucket(store, topic="restored", verify_checksums=True).partitions.values()
    assert [s.problems for s in copied.segments] == [()]
    assert copied.segments[0].metadata == started
    finished = dataclasses.replace(started, custom_metadata=copied.segments[0].custom_metadata())
    reader = chunked(**encryption_settings(keys, "k1"))
    with reader.fetch_log_segment(finished, 0) as stream:
        assert stream.read() == segment_data.log_segment.read_bytes()
    with pytest.raises(ValueError, match="another topic id"):
        store.restore_segment_objects(source, source, suffixes, described.to_bytes())
