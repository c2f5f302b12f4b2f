"""The chunked format on the local-directory store: every combination of chunk size,
compression and encryption reads back byte for byte, key rotation, plain objects copied
before, and what a bucket reader without the key sees."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import re
from pathlib import Path

import pytest

from storage_core.errors import InvalidConfigError
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.transaction_index import AbortedTxn, TransactionIndex
from storage_core.records.compression import CompressionType
from storage_core.tiered.chunked.chunk_index import ChunkIndex, frame_context
from storage_core.tiered.chunked.chunk_transform import checksum_of
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.errors import (
    ChunkIntegrityError,
    MissingEncryptionKeyError,
    SegmentManifestError,
)
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix, segment_keys
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.chunked_support import (
    MARKER,
    closed_segment,
    closed_segment_metadata,
    encryption_settings,
    segment_ref,
    write_key_pair,
)
from tests.conftest import make_batch


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    directory = tmp_path_factory.mktemp("keys")
    return {key_id: write_key_pair(directory, key_id) for key_id in ("k1", "k2")}


def chunked(tmp_path: Path, **settings: str) -> ChunkedRemoteStorageManager:
    manager = load_remote_storage_manager(
        "LocalTieredStorage",
        {"rsm.config.local.storage.dir": str(tmp_path / "remote"), **settings},
    )
    assert isinstance(manager, ChunkedRemoteStorageManager)
    return manager


def read_all(
    manager: ChunkedRemoteStorageManager, segment: RemoteSegmentRef, start: int, end: int | None
) -> bytes:
    with manager.fetch_log_segment(segment, start, end) as stream:
        return stream.read()


def stored_objects(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "remote").rglob("*") if p.is_file())


COMBINATIONS = list(
    itertools.product((100, 4096, 4 * 1024 * 1024), (None, 1000), (False, True), (False, True))
)


@pytest.mark.parametrize(("chunk_size", "frame_size", "compression", "encryption"), COMBINATIONS)
def test_every_combination_reads_back_byte_for_byte(
    tmp_path: Path,
    keys: dict[str, dict[str, str]],
    chunk_size: int,
    frame_size: int | None,
    compression: bool,
    encryption: bool,
) -> None:
    data = closed_segment(tmp_path)
    original = data.log_segment.read_bytes()
    settings = {
        **({} if frame_size is None else {"rsm.config.chunk.frame.size": str(frame_size)}),
        "rsm.config.chunk.size": str(chunk_size),
        "rsm.config.compression.enabled": str(compression).lower(),
        **(encryption_settings(keys, "k1") if encryption else {}),
    }
    writer = chunked(tmp_path, **settings)
    segment = segment_ref()
    custom = writer.copy_log_segment_data(segment, data)
    assert custom is not None  # says "chunked" in the segment's metadata

    reader = chunked(tmp_path, **settings)  # a fresh reader: nothing cached
    manifest = reader.segment_manifest(segment)
    assert manifest is not None
    assert manifest.chunk_index.original_size == len(original)
    assert len(manifest.chunk_index) == -(-len(original) // chunk_size)
    assert manifest.chunk_index.frame_size == min(frame_size or 256 * 1024, chunk_size)
    assert manifest.version == 3
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
        (37, size // 3),
        (4095, 4097),
    ]:
        expected = original[start : None if end is None else end + 1]
        assert read_all(reader, segment, start, end) == expected, (start, end)
    for index_type, path in [
        (IndexType.OFFSET, data.offset_index),
        (IndexType.TIMESTAMP, data.time_index),
        (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot),
    ]:
        assert path is not None
        with reader.fetch_index(segment, index_type) as stream:
            assert stream.read() == path.read_bytes()
    with reader.fetch_index(segment, IndexType.LEADER_EPOCH) as stream:
        assert stream.read() == data.leader_epoch_index
    with pytest.raises(RemoteResourceNotFoundError):
        reader.fetch_index(segment, IndexType.TRANSACTION)  # the segment has none
    stored_log = tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.LOG]
    if compression and chunk_size >= 4096:  # a frame of 100 bytes costs more than it saves
        assert stored_log.stat().st_size < len(original) // 2  # the values repeat
    if not compression and not encryption:
        assert stored_log.read_bytes() == original  # chunking alone changes no byte


def test_a_bucket_reader_without_the_key_sees_no_record_bytes(
    tmp_path: Path, keys: dict[str, dict[str, str]]
) -> None:
    data = closed_segment(tmp_path)
    assert MARKER in data.log_segment.read_bytes()
    writer = chunked(tmp_path, **encryption_settings(keys, "k1"))
    writer.copy_log_segment_data(segment_ref(), data)
    objects = stored_objects(tmp_path)
    assert {p.suffix for p in objects} >= {".log", ".index", ".timeindex", ".rsm-manifest"}
    for path in objects:
        content = path.read_bytes()
        assert MARKER not in content, path
    # Neither do the indexes tell offsets or timestamps: they are encrypted too.
    index = next(p for p in objects if p.suffix == ".index")
    assert index.read_bytes() != data.offset_index.read_bytes()


def test_key_rotation_keeps_old_segments_readable_and_a_missing_key_is_named(
    tmp_path: Path, keys: dict[str, dict[str, str]]
) -> None:
    data = closed_segment(tmp_path)
    original = data.log_segment.read_bytes()
    old, new = segment_ref(), segment_ref()
    chunked(tmp_path, **encryption_settings({"k1": keys["k1"]}, "k1")).copy_log_segment_data(
        old, data
    )
    rotated = chunked(tmp_path, **encryption_settings(keys, "k2"))
    rotated.copy_log_segment_data(new, data)
    for segment, key_id in ((old, "k1"), (new, "k2")):
        manifest = rotated.segment_manifest(segment)
        assert manifest is not None and manifest.encryption is not None
        assert manifest.encryption.wrapped_data_key.key_id == key_id
        assert read_all(rotated, segment, 0, None) == original

    without_k1 = chunked(tmp_path, **encryption_settings({"k2": keys["k2"]}, "k2"))
    assert read_all(without_k1, new, 0, None) == original
    with pytest.raises(MissingEncryptionKeyError, match="'k1'"):
        without_k1.fetch_log_segment(old, 0)
    no_ring = chunked(tmp_path)
    with pytest.raises(MissingEncryptionKeyError, match="'k2'"):
        no_ring.fetch_log_segment(new, 0)


def test_plain_segments_copied_before_read_as_they_are(tmp_path: Path) -> None:
    data = closed_segment(tmp_path)
    plain = LocalTieredStorage(tmp_path / "remote")
    segment = segment_ref()
    assert plain.copy_log_segment_data(segment, data) is None
    manager = chunked(tmp_path, **{"rsm.config.compression.enabled": "true"})
    assert manager.segment_manifest(segment) is None
    assert read_all(manager, segment, 5, None) == data.log_segment.read_bytes()[5:]
    with manager.fetch_index(segment, IndexType.OFFSET) as stream:
        assert stream.read() == data.offset_index.read_bytes()


def flip_byte(path: Path, position: int) -> None:
    content = bytearray(path.read_bytes())
    content[position] ^= 0x01
    path.write_bytes(bytes(content))


@pytest.mark.parametrize("encryption", [False, True])
def test_a_corrupt_chunk_is_never_served(
    tmp_path: Path, keys: dict[str, dict[str, str]], encryption: bool
) -> None:
    data = closed_segment(tmp_path)
    settings = {
        "rsm.config.chunk.size": "1000",
        **(encryption_settings(keys, "k1") if encryption else {}),
    }
    manager = chunked(tmp_path, **settings)
    segment = segment_ref()
    manager.copy_log_segment_data(segment, data)
    stored_log = tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.LOG]
    flip_byte(stored_log, 2500)  # in the third chunk
    reader = chunked(tmp_path, **settings)
    assert read_all(reader, segment, 0, 1999) == data.log_segment.read_bytes()[:2000]
    with pytest.raises(ChunkIntegrityError, match=r"chunk 2 \(original bytes 2000-2999\)"):
        read_all(reader, segment, 0, None)


@pytest.mark.parametrize("encryption", [False, True])
def test_a_short_read_checks_the_frames_it_needs_and_a_corrupt_frame_is_never_served(
    tmp_path: Path, keys: dict[str, dict[str, str]], encryption: bool
) -> None:
    """A read of a chunk's first bytes (as the broker reads: views) checks its first frames
    only, so it is served while a later frame of the same chunk is damaged; any read that
    reaches that frame fails naming it, and the prefetch of the whole chunk caches nothing."""
    data = closed_segment(tmp_path)
    original = data.log_segment.read_bytes()
    settings = {
        "rsm.config.chunk.size": "8000",
        "rsm.config.chunk.frame.size": "1000",
        "rsm.config.compression.enabled": "true",
        **(encryption_settings(keys, "k1") if encryption else {}),
    }
    manager = chunked(tmp_path, **settings)
    segment = segment_ref()
    manager.copy_log_segment_data(segment, data)
    manifest = manager.segment_manifest(segment)
    assert manifest is not None
    damaged = manifest.chunk_index.chunk(0).frames[5]  # original bytes 5000-5999
    stored_log = tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.LOG]
    flip_byte(stored_log, damaged.stored_position + damaged.stored_size // 2)

    reader = chunked(
        tmp_path, **settings, **{"rsm.config.fetch.chunk.cache.prefetch.max.size": "16000"}
    )
    with reader.fetch_log_segment(segment, 100) as stream:
        assert bytes(stream.raw.read_view(2000)) == original[100:2100]  # frames 0-2
    with (
        pytest.raises(
            ChunkIntegrityError, match=r"chunk 0 .* frame 5 \(original bytes 5000-5999\)"
        ),
        reader.fetch_log_segment(segment, 4500) as stream,
    ):
        stream.raw.read_view(1000)
    with pytest.raises(ChunkIntegrityError, match="frame 5"):
        read_all(reader, segment, 0, None)
    assert read_all(reader, segment, 8000, None) == original[8000:]  # the next chunk


def test_segments_copied_in_format_version_1_still_read(
    tmp_path: Path, keys: dict[str, dict[str, str]]
) -> None:
    """Copies made before frames existed: one check per chunk, each chunk's encryption
    authenticating its number alone, a manifest listing ``chunks``."""
    data = closed_segment(tmp_path)
    original = data.log_segment.read_bytes()
    settings = {
        "rsm.config.chunk.size": "1000",
        "rsm.config.compression.enabled": "true",
        **encryption_settings(keys, "k1"),
    }
    writer = chunked(tmp_path, **settings)
    segment = segment_ref()
    writer.copy_log_segment_data(segment, data)
    keys_of = segment_keys("", segment)
    manifest_path = tmp_path / "remote" / keys_of[RemoteObjectSuffix.SEGMENT_MANIFEST]
    log_path = tmp_path / "remote" / keys_of[RemoteObjectSuffix.LOG]
    framed = SegmentManifest.from_bytes(manifest_path.read_bytes(), where="test")
    readable = writer._readable_segment(segment)
    assert readable is not None
    transform = readable.transform
    stored = log_path.read_bytes()
    chunks = [framed.chunk_index.chunk(i) for i in range(len(framed.chunk_index))]
    old_chunks = [
        transform.transform_frame(
            frame_context(chunk.id, 0, framed=False),
            transform.restore_chunk(
                chunk, stored[chunk.stored_position : chunk.stored_end], where="test"
            ),
        )
        for chunk in chunks
    ]
    log_path.write_bytes(b"".join(old_chunks))
    unframed = dataclasses.replace(
        framed,
        chunk_index=ChunkIndex(
            chunk_size=1000,
            original_size=len(original),
            stored_sizes=tuple(len(c) for c in old_chunks),
            checksums=tuple(checksum_of(c) for c in old_chunks),
        ),
    )
    manifest_path.write_bytes(unframed.to_bytes())
    document = json.loads(manifest_path.read_bytes())
    assert document["version"] == 1 and "chunks" in document and "frames" not in document

    reader = chunked(tmp_path, **settings)
    assert read_all(reader, segment, 0, None) == original
    with reader.fetch_log_segment(segment, 1500) as stream:
        assert bytes(stream.raw.read_view(400)) == original[1500:1900]
    reread = reader.segment_manifest(segment)
    assert reread is not None and reread.version == 1
    assert SegmentManifest.from_bytes(reread.to_bytes(), where="test") == reread  # kept as 1


def test_segments_copied_in_format_version_2_still_read(tmp_path: Path) -> None:
    """Version 2 wrote each frame's stored size and checksum as JSON numbers; version 3 packs
    them (base64 of big-endian 32-bit integers). Both are read, and a version 2 manifest
    written again keeps its version."""
    data = closed_segment(tmp_path)
    original = data.log_segment.read_bytes()
    settings = {"rsm.config.chunk.size": "1000", "rsm.config.chunk.frame.size": "250"}
    writer = chunked(tmp_path, **settings)
    segment = segment_ref()
    writer.copy_log_segment_data(segment, data)
    manifest_path = (
        tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.SEGMENT_MANIFEST]
    )
    current = SegmentManifest.from_bytes(manifest_path.read_bytes(), where="test")
    assert current.version == 3
    packed = json.loads(manifest_path.read_bytes())["frames"]["storedSizes"]
    assert isinstance(packed, str)
    manifest_path.write_bytes(dataclasses.replace(current, packed_frames=False).to_bytes())
    document = json.loads(manifest_path.read_bytes())
    assert document["version"] == 2
    assert document["frames"]["storedSizes"] == list(current.chunk_index.stored_sizes)

    reader = chunked(tmp_path, **settings)
    assert read_all(reader, segment, 0, None) == original
    reread = reader.segment_manifest(segment)
    assert reread is not None and reread.version == 2
    assert reread.chunk_index == current.chunk_index
    assert SegmentManifest.from_bytes(reread.to_bytes(), where="test") == reread  # kept as 2


def test_packed_frame_sizes_that_are_not_whole_integers_are_named(tmp_path: Path) -> None:
    data = closed_segment(tmp_path)
    writer = chunked(tmp_path)
    segment = segment_ref()
    writer.copy_log_segment_data(segment, data)
    manifest_path = (
        tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.SEGMENT_MANIFEST]
    )
    document = json.loads(manifest_path.read_bytes())
    document["frames"]["storedSizes"] = base64.b64encode(b"\x00\x01\x02").decode()
    manifest_path.write_bytes(json.dumps(document).encode())
    with pytest.raises(SegmentManifestError, match="storedSizes holds 3 bytes"):
        chunked(tmp_path).fetch_log_segment(segment, 0)


def test_a_truncated_object_and_a_missing_manifest_are_errors(tmp_path: Path) -> None:
    data = closed_segment(tmp_path)
    manager = chunked(
        tmp_path, **{"rsm.config.chunk.size": "1000", "rsm.config.compression.enabled": "true"}
    )
    segment = segment_ref()
    custom = manager.copy_log_segment_data(segment, data)
    keys = segment_keys("", segment)
    stored_log = tmp_path / "remote" / keys[RemoteObjectSuffix.LOG]
    stored_log.write_bytes(stored_log.read_bytes()[:-10])
    reader = chunked(tmp_path)
    with pytest.raises(Exception, match=r"early|truncated"):
        read_all(reader, segment, 0, None)

    (tmp_path / "remote" / keys[RemoteObjectSuffix.SEGMENT_MANIFEST]).unlink()
    with_metadata = _with_custom_metadata(segment, custom)
    with pytest.raises(SegmentManifestError, match="manifest object is missing"):
        chunked(tmp_path).fetch_log_segment(with_metadata, 0)


def test_an_unreadable_manifest_is_named(tmp_path: Path) -> None:
    data = closed_segment(tmp_path)
    manager = chunked(tmp_path)
    segment = segment_ref()
    manager.copy_log_segment_data(segment, data)
    manifest = tmp_path / "remote" / segment_keys("", segment)[RemoteObjectSuffix.SEGMENT_MANIFEST]
    manifest.write_bytes(manifest.read_bytes().replace(b'"version":3', b'"version":9'))
    with pytest.raises(SegmentManifestError, match="version 9"):
        chunked(tmp_path).fetch_log_segment(segment, 0)


def test_settings_the_format_cannot_honour_are_refused_by_name(
    tmp_path: Path, keys: dict[str, dict[str, str]]
) -> None:
    with pytest.raises(InvalidConfigError, match="needs a key ring"):
        chunked(tmp_path, **{"rsm.config.encryption.enabled": "true"})
    with pytest.raises(InvalidConfigError, match=r"chunk\.size"):
        chunked(tmp_path, **{"rsm.config.chunk.size": "0"})
    with pytest.raises(InvalidConfigError, match="'k3' is not in the key ring"):
        chunked(tmp_path, **encryption_settings(keys, "k3"))
    with pytest.raises(InvalidConfigError, match=r"k9\.public\.key\.file names a key pair"):
        chunked(
            tmp_path,
            **encryption_settings(keys, "k1"),
            **{"rsm.config.encryption.key.pairs.k9.public.key.file": "/nowhere"},
        )
    broken = tmp_path / "broken.pem"
    broken.write_text("not a key")
    with pytest.raises(InvalidConfigError, match=f"{broken} is not an unencrypted PEM public key"):
        chunked(
            tmp_path,
            **encryption_settings(
                {"k1": {"rsm.config.encryption.key.pairs.k1.public.key.file": str(broken)}}, "k1"
            ),
        )
    with pytest.raises(InvalidConfigError, match=r"fetch\.chunk\.cache\.class=lru is none of"):
        chunked(tmp_path, **{"rsm.config.fetch.chunk.cache.class": "lru"})
    with pytest.raises(InvalidConfigError, match=r"fetch\.chunk\.cache\.path is required"):
        chunked(tmp_path, **{"rsm.config.fetch.chunk.cache.class": "disk"})
    with pytest.raises(InvalidConfigError, match=r"read by no other"):
        chunked(tmp_path, **{"rsm.config.fetch.chunk.cache.path": str(tmp_path)})
    with pytest.raises(InvalidConfigError, match=r"fetch\.chunk\.cache\.size must be > 0"):
        chunked(tmp_path, **{"rsm.config.fetch.chunk.cache.size": "-1"})


def test_the_compression_heuristic_skips_segments_whose_batches_are_compressed(
    tmp_path: Path,
) -> None:
    log = Log(tmp_path / "compressed-0", LogConfig())
    try:
        log.append_as_leader(
            make_batch(50, value_size=200, compression=CompressionType.GZIP), leader_epoch=0
        )
        log.roll()
        segment_file = log.segments[0]
        data = LogSegmentData(
            log_segment=segment_file.log.path,
            offset_index=segment_file.offset_index.path,
            time_index=segment_file.time_index.path,
        )
        settings = {
            "rsm.config.compression.enabled": "true",
            "rsm.config.compression.heuristic.enabled": "true",
        }
        manager = chunked(tmp_path, **settings)
        compressed, plain = segment_ref(), segment_ref()
        manager.copy_log_segment_data(compressed, data)
        manifest = manager.segment_manifest(compressed)
        assert manifest is not None and manifest.compression is False
        manager.copy_log_segment_data(plain, closed_segment(tmp_path / "other"))
        manifest = manager.segment_manifest(plain)
        assert manifest is not None and manifest.compression is True
    finally:
        log.close()


def _with_custom_metadata(segment: RemoteSegmentRef, custom: bytes | None) -> object:
    class WithCustomMetadata:
        remote_log_segment_id = segment.remote_log_segment_id
        start_offset = segment.start_offset
        custom_metadata = custom

    return WithCustomMetadata()


def copy_described(
    tmp_path: Path, data: LogSegmentData
) -> tuple[RemoteSegmentRef, RemoteLogSegmentMetadata, str]:
    """``data`` copied in chunks of 1,000 bytes by broker 2: its ref, metadata and the key of
    its manifest."""
    manager = chunked(tmp_path, **{"rsm.config.chunk.size": "1000"})
    ref = segment_ref()
    metadata = closed_segment_metadata(ref, data, broker_id=2)
    manager.copy_log_segment_data(metadata, data)
    return ref, metadata, segment_keys("", ref)[RemoteObjectSuffix.SEGMENT_MANIFEST]


def test_the_manifest_describes_the_segment_in_kafkas_serde(tmp_path: Path) -> None:
    """A restore reads a segment's metadata and the partition's leader epochs from its
    manifest alone; manifests written before the section existed still read."""
    data = closed_segment(tmp_path)
    _ref, metadata, key = copy_described(tmp_path, data)
    stored = (tmp_path / "remote" / key).read_bytes()
    document = json.loads(stored)
    assert document["segment"]["topic"] == "chunked-topic"
    assert document["segment"]["endOffset"] == 79
    assert document["segment"]["leaderEpochs"] == [[0, 0], [1, 30], [2, 60]]
    manifest = SegmentManifest.from_bytes(stored, where=key)
    assert manifest.segment is not None
    assert manifest.segment.metadata == metadata
    assert manifest.segment.metadata.segment_leader_epochs == {0: 0, 1: 30, 2: 60}
    assert manifest.segment.leader_epochs == (
        EpochEntry(0, 0),
        EpochEntry(1, 30),
        EpochEntry(2, 60),
    )

    del document["segment"]
    older = SegmentManifest.from_bytes(json.dumps(document).encode(), where=key)
    assert older.segment is None
    assert older.chunk_index == manifest.chunk_index

    document["segment"] = {"metadata": "AAAA", "leaderEpochs": []}
    with pytest.raises(SegmentManifestError, match=rf"{key}.*segment metadata"):
        SegmentManifest.from_bytes(json.dumps(document).encode(), where=key)


def test_a_reader_parses_the_segment_section_only_when_it_is_asked_for(tmp_path: Path) -> None:
    """Reading records never needs the manifest's ``segment`` section: the storage manager
    leaves it unparsed, so a damaged one fails only what reads it, naming the object, and a
    manifest written again keeps the section as it was."""
    data = closed_segment(tmp_path)
    ref, metadata, key = copy_described(tmp_path, data)
    path = tmp_path / "remote" / key
    intact = path.read_bytes()
    eager = SegmentManifest.from_bytes(intact, where=key)
    lazy = SegmentManifest.from_bytes(intact, where=key, describe=False)
    assert lazy == eager and lazy.segment == eager.segment is not None
    document = json.loads(intact)
    document["segment"]["metadata"] = "AAAA"
    path.write_text(json.dumps(document))

    reader = chunked(tmp_path, **{"rsm.config.chunk.size": "1000"})
    with reader.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == data.log_segment.read_bytes()
    manifest = reader.segment_manifest(metadata)
    assert manifest is not None
    with pytest.raises(SegmentManifestError, match=rf"{re.escape(str(ref))}.*segment metadata"):
        _ = manifest.segment
    assert json.loads(manifest.to_bytes())["segment"] == document["segment"]
    with pytest.raises(SegmentManifestError, match="segment metadata"):
        _ = manifest == manifest  # equality compares the sections too
    with pytest.raises(SegmentManifestError, match="segment metadata"):
        SegmentManifest.from_bytes(path.read_bytes(), where=key)  # the tools read it eagerly


def test_a_restored_logs_last_segment_closes_the_aborts_whose_markers_were_not_copied(
    tmp_path: Path,
) -> None:
    """The copy records the aborts running past the segment's end; once a restore marks the
    segment as ending the log, its transaction index is served with them closed at its end
    (after its own entries), and a listed abort that does not run past the end is refused."""
    data = closed_segment(tmp_path)
    own = AbortedTxn(producer_id=3, first_offset=10, last_offset=20, last_stable_offset=10)
    txn_index = tmp_path / "segment.txnindex"
    txn_index.write_bytes(own.to_bytes())
    past = (
        AbortedTxn(producer_id=7, first_offset=70, last_offset=95, last_stable_offset=70),
        AbortedTxn(producer_id=8, first_offset=40, last_offset=120, last_stable_offset=40),
    )
    data = dataclasses.replace(data, transaction_index=txn_index, aborted_txns_past_end=past)
    _ref, metadata, key = copy_described(tmp_path, data)
    manager = chunked(tmp_path, **{"rsm.config.chunk.size": "1000"})
    path = tmp_path / "remote" / key
    document = json.loads(path.read_bytes())
    assert document["segment"]["abortedPastEnd"] == [
        {"producerId": 7, "firstOffset": 70, "lastOffset": 95, "lastStableOffset": 70},
        {"producerId": 8, "firstOffset": 40, "lastOffset": 120, "lastStableOffset": 40},
    ]
    assert document["segment"]["abortsClosedAtEnd"] is False
    with manager.fetch_index(metadata, IndexType.TRANSACTION) as stream:
        assert stream.read() == own.to_bytes()  # the source's log has the markers

    document["segment"]["abortsClosedAtEnd"] = True
    path.write_text(json.dumps(document))
    restored = chunked(tmp_path, **{"rsm.config.chunk.size": "1000"})
    with restored.fetch_index(metadata, IndexType.TRANSACTION) as stream:
        served = TransactionIndex(0, write_to(tmp_path / "served.txnindex", stream.read()))
    served.sanity_check()
    assert served.all_entries() == [
        own,
        AbortedTxn(producer_id=7, first_offset=70, last_offset=79, last_stable_offset=70),
        AbortedTxn(producer_id=8, first_offset=40, last_offset=79, last_stable_offset=40),
    ]
    assert [t.producer_id for t in served.collect_aborted_txns(79, 80).aborted_transactions] == [
        7,
        8,
    ]

    document["segment"]["abortedPastEnd"][0]["lastOffset"] = 79
    with pytest.raises(SegmentManifestError, match=r"producer 7 .* does not run past"):
        SegmentManifest.from_bytes(json.dumps(document).encode(), where=key)
    del document["segment"]["abortedPastEnd"]
    unknown = SegmentManifest.from_bytes(json.dumps(document).encode(), where=key)
    assert unknown.segment is not None and unknown.segment.aborted_past_end is None
    assert unknown.segment.closing_aborts() == ()


def write_to(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path
