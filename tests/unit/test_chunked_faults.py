"""Faults of the chunked format on the local-directory store: what the store holds is damaged
(a chunk corrupted, chunks swapped, an object cut short, the manifest or an index object gone)
or the store fails while a read is under way. Each read fails with a ``RemoteStorageError``
naming the segment; none returns a wrong byte, and chunks before a bad one are still served."""

from __future__ import annotations

import base64
import itertools
import json
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from storage_core.log.transaction_index import AbortedTxn
from storage_core.replication.tier_state_machine import read_producer_snapshot
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.errors import ChunkIntegrityError, SegmentManifestError
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_keys
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_support import closed_segment, encryption_settings, segment_ref, write_key_pair

CHUNK_SIZE = 1000


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    return {"k1": write_key_pair(tmp_path_factory.mktemp("keys"), "k1")}


@pytest.fixture(scope="module")
def segment_data(tmp_path_factory: pytest.TempPathFactory) -> LogSegmentData:
    """A real closed segment (about 24 KB: 25 chunks of 1000 bytes), with a transaction index
    of two aborted transactions; shared, never changed."""
    directory = tmp_path_factory.mktemp("segment")
    data = closed_segment(directory)
    txn_index = directory / "00000000000000000000.txnindex"
    txn_index.write_bytes(
        b"".join(
            AbortedTxn(
                producer_id=7, first_offset=first, last_offset=first + 9, last_stable_offset=first
            ).to_bytes()
            for first in (10, 40)
        )
    )
    return LogSegmentData(
        log_segment=data.log_segment,
        offset_index=data.offset_index,
        time_index=data.time_index,
        producer_snapshot=data.producer_snapshot,
        transaction_index=txn_index,
        leader_epoch_index=data.leader_epoch_index,
    )


class Copied:
    """One segment copied chunked to a store under ``tmp_path``, and a way to its objects."""

    def __init__(self, tmp_path: Path, data: LogSegmentData, settings: dict[str, str]) -> None:
        self.root = tmp_path / "remote"
        self.settings = {
            "rsm.config.local.storage.dir": str(self.root),
            "rsm.config.chunk.size": str(CHUNK_SIZE),
            **settings,
        }
        self.data = data
        self.original = data.log_segment.read_bytes()
        self.segment = segment_ref()
        self.custom_metadata = self.manager().copy_log_segment_data(self.segment, data)
        self.reader = self.manager()  # nothing cached: reads what the store holds
        manifest = self.manager().segment_manifest(self.segment)
        assert manifest is not None
        self.chunk_index = manifest.chunk_index

    def manager(self) -> ChunkedRemoteStorageManager:
        manager = load_remote_storage_manager("LocalTieredStorage", self.settings)
        assert isinstance(manager, ChunkedRemoteStorageManager)
        return manager

    def path(self, suffix: RemoteObjectSuffix) -> Path:
        return self.root / segment_keys("", self.segment)[suffix]

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        with self.reader.fetch_log_segment(self.segment, start, end) as stream:
            return stream.read()

    def index(self, index_type: IndexType) -> bytes:
        with self.reader.fetch_index(self.segment, index_type) as stream:
            return stream.read()


def names_segment(error: pytest.ExceptionInfo[BaseException], copied: Copied) -> bool:
    return str(copied.segment.segment_id) in str(error.value)


def settings_of(
    keys: dict[str, dict[str, str]], compression: bool, encryption: bool
) -> dict[str, str]:
    return {
        "rsm.config.compression.enabled": str(compression).lower(),
        **(encryption_settings(keys, "k1") if encryption else {}),
    }


TRANSFORMS = list(itertools.product((False, True), (False, True)))


def flip_byte(path: Path, position: int) -> None:
    content = bytearray(path.read_bytes())
    content[position] ^= 0x01
    path.write_bytes(bytes(content))


def rewrite_manifest(copied: Copied, change: object) -> None:
    path = copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST)
    document = json.loads(path.read_bytes())
    change(document)  # type: ignore[operator]
    path.write_bytes(json.dumps(document).encode())


def rewrite_frame_checksums(copied: Copied, change: object) -> None:
    """Edit the manifest's frame checksums as a list (stored as base64 of big-endian 32-bit
    integers), the way someone with write access to the bucket could."""

    def edit(document: dict) -> None:
        packed = base64.b64decode(document["frames"]["checksums"])
        checksums = list(struct.unpack(f">{len(packed) // 4}I", packed))
        change(checksums)  # type: ignore[operator]
        packed = struct.pack(f">{len(checksums)}I", *checksums)
        document["frames"]["checksums"] = base64.b64encode(packed).decode()

    rewrite_manifest(copied, edit)


@pytest.mark.parametrize(("compression", "encryption"), TRANSFORMS)
def test_a_corrupt_chunk_is_never_served_and_the_chunks_around_it_are(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    compression: bool,
    encryption: bool,
) -> None:
    copied = Copied(tmp_path, segment_data, settings_of(keys, compression, encryption))
    bad = copied.chunk_index.chunk(3)
    flip_byte(copied.path(RemoteObjectSuffix.LOG), bad.stored_position + bad.stored_size // 2)

    # One stream over the whole segment: the three chunks before come out, then the error.
    with copied.reader.fetch_log_segment(copied.segment, 0) as stream:
        assert stream.read(bad.original_position) == copied.original[: bad.original_position]
        with pytest.raises(ChunkIntegrityError, match=r"chunk 3 \(original bytes 3000-3999\)") as e:
            stream.read(1)
    assert names_segment(e, copied)
    assert "CRC32C" in str(e.value)
    # A read inside the bad chunk fails as well; reads that skip it are whole.
    with pytest.raises(ChunkIntegrityError):
        copied.read(bad.original_position + 10, bad.original_position + 10)
    assert copied.read(0, bad.original_position - 1) == copied.original[: bad.original_position]
    assert copied.read(bad.original_end) == copied.original[bad.original_end :]


def test_a_corrupt_chunk_whose_checksum_was_rewritten_fails_its_tag(
    tmp_path: Path, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    """Someone who can write the bucket but has no key fixes up the CRC32C in the manifest:
    AES-GCM's tag still refuses the chunk."""
    copied = Copied(tmp_path, segment_data, settings_of(keys, False, True))
    bad = copied.chunk_index.chunk(2)
    log = copied.path(RemoteObjectSuffix.LOG)
    flip_byte(log, bad.stored_position + 40)
    stored = log.read_bytes()[bad.stored_position : bad.stored_end]

    def fix_checksum(checksums: list[int]) -> None:
        checksums[2] = crc32c(stored)

    rewrite_frame_checksums(copied, fix_checksum)
    with pytest.raises(ChunkIntegrityError, match="authentication tag") as e:
        copied.read(0)
    assert names_segment(e, copied) and "chunk 2 " in str(e.value)
    assert copied.read(0, bad.original_position - 1) == copied.original[: bad.original_position]


def test_chunks_swapped_in_the_store_fail_their_tags(
    tmp_path: Path, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    """Two whole chunks of the same stored size swapped, their checksums with them: each
    chunk's number is authenticated, so neither is served in the other's place."""
    copied = Copied(tmp_path, segment_data, settings_of(keys, False, True))
    first, second = copied.chunk_index.chunk(1), copied.chunk_index.chunk(2)
    assert first.stored_size == second.stored_size
    log = copied.path(RemoteObjectSuffix.LOG)
    content = log.read_bytes()
    one = content[first.stored_position : first.stored_end]
    two = content[second.stored_position : second.stored_end]
    log.write_bytes(content[: first.stored_position] + two + one + content[second.stored_end :])

    def swap_checksums(checksums: list[int]) -> None:
        checksums[1], checksums[2] = checksums[2], checksums[1]

    rewrite_frame_checksums(copied, swap_checksums)
    with pytest.raises(ChunkIntegrityError, match=r"chunk 1 .*authentication tag") as e:
        copied.read(first.original_position)
    assert names_segment(e, copied)
    with pytest.raises(ChunkIntegrityError, match=r"chunk 2 .*authentication tag"):
        copied.read(second.original_position)
    assert copied.read(0, first.original_position - 1) == copied.original[:CHUNK_SIZE]


@pytest.mark.parametrize(("compression", "encryption"), TRANSFORMS)
def test_a_truncated_log_object_serves_the_whole_chunks_before_the_cut(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    compression: bool,
    encryption: bool,
) -> None:
    copied = Copied(tmp_path, segment_data, settings_of(keys, compression, encryption))
    cut = copied.chunk_index.chunk(5)
    log = copied.path(RemoteObjectSuffix.LOG)
    log.write_bytes(log.read_bytes()[: cut.stored_position + cut.stored_size // 2])

    with copied.reader.fetch_log_segment(copied.segment, 0) as stream:
        assert stream.read(cut.original_position) == copied.original[: cut.original_position]
        with pytest.raises(ChunkIntegrityError, match=r"chunk 5 .*early \(truncated\?\)") as e:
            stream.read()
    assert names_segment(e, copied)
    # A read that starts past the cut: nothing of the chunk is there.
    after = copied.chunk_index.chunk(8)
    with pytest.raises(RemoteStorageError, match="beyond") as e:
        copied.read(after.original_position)
    assert names_segment(e, copied)
    assert copied.read(0, cut.original_position - 1) == copied.original[: cut.original_position]


@pytest.mark.parametrize("encryption", [False, True])
@pytest.mark.parametrize(
    "suffix",
    [
        RemoteObjectSuffix.OFFSET_INDEX,
        RemoteObjectSuffix.TRANSACTION_INDEX,
        RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT,
    ],
)
def test_a_truncated_index_object_is_refused(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    suffix: RemoteObjectSuffix,
    encryption: bool,
) -> None:
    copied = Copied(tmp_path, segment_data, settings_of(keys, False, encryption))
    path = copied.path(suffix)
    path.write_bytes(path.read_bytes()[:-1])
    index_type = next(t for t in IndexType if RemoteObjectSuffix.for_index(t) is suffix)
    with pytest.raises(ChunkIntegrityError, match=f"\\.{suffix.value}: .*CRC32C") as e:
        copied.index(index_type)
    assert names_segment(e, copied)


def test_a_truncated_manifest_is_refused(tmp_path: Path, segment_data: LogSegmentData) -> None:
    copied = Copied(tmp_path, segment_data, {"rsm.config.compression.enabled": "true"})
    manifest = copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST)
    manifest.write_bytes(manifest.read_bytes()[:-20])
    with pytest.raises(SegmentManifestError, match="unreadable") as e:
        copied.read(0)
    assert names_segment(e, copied)


@pytest.mark.parametrize(("compression", "encryption"), TRANSFORMS)
def test_a_missing_manifest_of_a_segment_whose_metadata_says_chunked_is_refused(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    compression: bool,
    encryption: bool,
) -> None:
    copied = Copied(tmp_path, segment_data, settings_of(keys, compression, encryption))
    copied.path(RemoteObjectSuffix.SEGMENT_MANIFEST).unlink()
    metadata = WithCustomMetadata(copied.segment, copied.custom_metadata)
    for read in (
        lambda: copied.reader.fetch_log_segment(metadata, 0),
        lambda: copied.reader.fetch_index(metadata, IndexType.OFFSET),
    ):
        with pytest.raises(SegmentManifestError, match="manifest object is missing") as e:
            read()
        assert names_segment(e, copied)


@pytest.mark.parametrize("encryption", [False, True])
@pytest.mark.parametrize("index_type", list(IndexType))
def test_a_deleted_index_object_is_an_error_not_an_absent_index(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    index_type: IndexType,
    encryption: bool,
) -> None:
    """A segment without a transaction index or a producer snapshot has none (a reader takes
    ``RemoteResourceNotFoundError`` for "no aborted transactions", "no producers"); a segment
    whose manifest lists the object and whose object is gone is damaged, and must not pass
    for one that has none."""
    copied = Copied(tmp_path, segment_data, settings_of(keys, False, encryption))
    copied.path(RemoteObjectSuffix.for_index(index_type)).unlink()
    with pytest.raises(RemoteStorageError) as e:
        copied.index(index_type)
    assert names_segment(e, copied)
    if index_type in (IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT):
        assert not isinstance(e.value, RemoteResourceNotFoundError), e.value
        assert "manifest lists" in str(e.value)


def test_a_deleted_transaction_index_is_not_read_as_no_aborted_transactions(
    tmp_path: Path, segment_data: LogSegmentData
) -> None:
    """What a read_committed consumer and a follower see: the remote index cache must not
    answer "no aborted transactions" (the aborted records would be served as committed) and
    the producer state built from the remote tier must not come out empty."""
    copied = Copied(tmp_path, segment_data, {})
    cache = RemoteIndexCache(copied.reader, tmp_path / "log-dir", max_size_bytes=1 << 20)
    try:
        with cache.acquire(copied.segment) as entry:
            aborted = entry.collect_aborted_txns(0, 80).aborted_transactions
            assert [txn.first_offset for txn in aborted] == [10, 40]
        cache.remove(copied.segment.segment_id)

        copied.path(RemoteObjectSuffix.TRANSACTION_INDEX).unlink()
        with pytest.raises(ChunkIntegrityError, match=r"\.txnindex") as e:
            cache.lookup_offset(copied.segment, 0)
        assert names_segment(e, copied)
    finally:
        cache.close()

    assert read_producer_snapshot(copied.reader, copied.segment, source="test") != []
    copied.path(RemoteObjectSuffix.PRODUCER_SNAPSHOT).unlink()
    with pytest.raises(ChunkIntegrityError, match=r"\.snapshot"):
        read_producer_snapshot(copied.reader, copied.segment, source="test")


def test_the_log_object_removed_between_the_manifest_read_and_the_chunk_read(
    tmp_path: Path, keys: dict[str, dict[str, str]], segment_data: LogSegmentData
) -> None:
    copied = Copied(tmp_path, segment_data, settings_of(keys, True, True))
    assert copied.reader.segment_manifest(copied.segment) is not None  # read and kept
    copied.path(RemoteObjectSuffix.LOG).unlink()
    with pytest.raises(RemoteStorageError, match="does not exist") as e:
        copied.read(CHUNK_SIZE)
    assert names_segment(e, copied)


@pytest.mark.parametrize("encryption", [False, True])
def test_the_log_object_cut_short_while_a_stream_reads_it(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    segment_data: LogSegmentData,
    encryption: bool,
) -> None:
    """The store loses the object's tail while a reader is in the middle of it: what was read
    is right, the rest is an error (the open file still sees the truncation). Uncompressed, so
    that the object is larger than what the stream has buffered when the tail goes."""
    copied = Copied(tmp_path, segment_data, settings_of(keys, False, encryption))
    log = copied.path(RemoteObjectSuffix.LOG)
    stored = log.read_bytes()
    with copied.reader.fetch_log_segment(copied.segment, 0) as stream:
        head = stream.read(CHUNK_SIZE)
        assert head == copied.original[:CHUNK_SIZE]
        with open(log, "r+b") as file:
            file.truncate(len(stored) // 2)
        with pytest.raises(RemoteStorageError) as e:
            while stream.read(CHUNK_SIZE):
                pass
    assert names_segment(e, copied)
    assert "early" in str(e.value)


class WithCustomMetadata:
    """Segment metadata as the broker passes it: the segment's id, start and custom
    metadata."""

    def __init__(self, segment: RemoteSegmentRef, custom_metadata: bytes | None) -> None:
        self.remote_log_segment_id = segment.remote_log_segment_id
        self.start_offset = segment.start_offset
        self.custom_metadata = custom_metadata
