"""``ChunkedRemoteStorageManager``: the chunked, self-describing format over a store.

New copies are written chunked (``storage_core.tiered.chunked``: chunk index, per-chunk
zstd and AES-256-GCM, a CRC32C per stored chunk) with the segment manifest last; the store
(``LocalTieredStorage``, ``S3RemoteStorageManager``) keeps the objects under the same keys as
before. Reads look for the manifest first: a segment without one was copied in the plain
format and is read as it is, so a tier that holds both formats reads transparently.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from storage_core.log.leader_epoch_cache import parse_leader_epoch_checkpoint
from storage_core.log.transaction_index import AbortedTxn
from storage_core.tiered.chunked.chunk_cache import (
    ChunkCache,
    ChunkKey,
    DiskChunkCache,
    MemoryChunkCache,
)
from storage_core.tiered.chunked.chunk_fetcher import ChunkFetcher, ReadableSegment
from storage_core.tiered.chunked.chunk_index import Chunk, ChunkIndex, frame_context
from storage_core.tiered.chunked.chunk_stream import ChunkStream
from storage_core.tiered.chunked.chunk_transform import (
    ChunkTransform,
    SegmentEncryption,
    checksum_of,
    segment_is_compressed,
)
from storage_core.tiered.chunked.custom_metadata import (
    chunked_format_version,
    encode_custom_metadata,
)
from storage_core.tiered.chunked.errors import (
    ChunkIntegrityError,
    MissingEncryptionKeyError,
    SegmentManifestError,
)
from storage_core.tiered.chunked.format_config import ChunkCacheConfig, ChunkedFormatConfig
from storage_core.tiered.chunked.segment_manifest import (
    EncryptionMetadata,
    ObjectDigest,
    SegmentDescription,
    SegmentManifest,
)
from storage_core.tiered.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_object_keys import RemoteObjectSuffix
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadataLike,
    RemoteObjectInfo,
    RemoteReadNeedsStoreError,
    RemoteResourceNotFoundError,
    RemoteSegmentRef,
    RemoteStorageError,
    RemoteStorageManager,
    SegmentManifestStore,
    check_positions,
    remote_object_store,
)

logger = logging.getLogger(__name__)

MANIFEST_CACHE_ENTRIES = 4096
# Objects whose absence readers take for an empty one (Kafka's RemoteIndexCache, a follower's
# producer state): a missing one the manifest lists must not pass for that.
_ABSENT_MEANS_EMPTY = frozenset({IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT})


class ChunkedRemoteStorageManager:
    """A ``RemoteStorageManager`` (and ``RemoteObjectStore``) writing the chunked format
    through ``store``; thread safe as the store is."""

    def __init__(self, store: RemoteStorageManager, config: ChunkedFormatConfig) -> None:
        if not isinstance(store, SegmentManifestStore):
            raise TypeError(f"{store!r} cannot store segment manifests")
        self.store = store
        self.config = config
        self._readable: OrderedDict[str, ReadableSegment | None] = OrderedDict()
        self._lock = threading.Lock()
        self.fetcher = ChunkFetcher(
            store,
            _chunk_cache(config.cache),
            prefetch_max_bytes=config.cache.prefetch_max_bytes,
            readable_segment=self._readable_segment,
        )

    def __repr__(self) -> str:
        return f"ChunkedRemoteStorageManager({self.store!r})"

    # -- copy ---------------------------------------------------------------------------------

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        log_segment_data: LogSegmentData,
    ) -> bytes | None:
        config = self.config
        data = log_segment_data
        compression = config.compression and not (
            config.compression_heuristic and segment_is_compressed(data.log_segment)
        )
        encryption = SegmentEncryption.generate() if config.encryption else None
        transform = ChunkTransform(compression=compression, encryption=encryption)
        with tempfile.TemporaryDirectory(prefix="rsm-chunked-") as scratch:
            directory = Path(scratch)
            log_path, chunk_index = _write_chunks(
                data.log_segment,
                directory / "log",
                transform,
                chunk_size=config.chunk_size,
                frame_size=config.effective_frame_size,
            )
            objects: dict[str, ObjectDigest] = {}

            def stored(suffix: RemoteObjectSuffix, source: Path | None) -> Path | None:
                if source is None:
                    return None
                content = transform.transform_object(suffix.value, _read(source))
                objects[suffix.value] = ObjectDigest(
                    stored_size=len(content), checksum=checksum_of(content)
                )
                if transform.encryption is None:
                    return source
                target = directory / suffix.value
                target.write_bytes(content)
                return target

            epochs = transform.transform_object(
                RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT.value, data.leader_epoch_index
            )
            objects[RemoteObjectSuffix.LEADER_EPOCH_CHECKPOINT.value] = ObjectDigest(
                stored_size=len(epochs), checksum=checksum_of(epochs)
            )
            offset_index = stored(RemoteObjectSuffix.OFFSET_INDEX, data.offset_index)
            time_index = stored(RemoteObjectSuffix.TIME_INDEX, data.time_index)
            assert offset_index is not None and time_index is not None
            producer_snapshot = stored(RemoteObjectSuffix.PRODUCER_SNAPSHOT, data.producer_snapshot)
            transaction_index = stored(RemoteObjectSuffix.TRANSACTION_INDEX, data.transaction_index)
            manifest = SegmentManifest(
                chunk_index=chunk_index,
                compression=compression,
                encryption=None
                if encryption is None or config.key_ring is None
                else EncryptionMetadata(
                    wrapped_data_key=config.key_ring.wrap(encryption.data_key),
                    aad=encryption.aad,
                ),
                objects=objects,
                description=_describe(
                    remote_log_segment_metadata,
                    data.leader_epoch_index,
                    aborted_past_end=data.aborted_txns_past_end,
                ),
            )
            manifest_bytes = manifest.to_bytes()
            custom_metadata = self.store.copy_log_segment_data(
                remote_log_segment_metadata,
                LogSegmentData(
                    log_segment=log_path,
                    offset_index=offset_index,
                    time_index=time_index,
                    producer_snapshot=producer_snapshot,
                    transaction_index=transaction_index,
                    leader_epoch_index=epochs,
                    segment_manifest=manifest_bytes,
                ),
            )
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        self._remember(
            str(segment.segment_id),
            ReadableSegment(remote_log_segment_metadata, segment, manifest, transform),
        )
        if custom_metadata is not None:
            return custom_metadata
        stored_size = (
            chunk_index.stored_size
            + sum(digest.stored_size for digest in objects.values())
            + len(manifest_bytes)
        )
        return encode_custom_metadata(remote_size=stored_size, format_version=manifest.version)

    # -- fetch --------------------------------------------------------------------------------

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        check_positions(start_position, end_position)
        readable = self._readable_segment(remote_log_segment_metadata)
        if readable is None:
            return self.store.fetch_log_segment(
                remote_log_segment_metadata, start_position, end_position
            )
        return self._chunk_stream(readable, start_position, end_position, self.fetcher.chunk_part)

    def fetch_cached_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        start_position: int,
        hits: list[ChunkKey],
    ) -> BinaryIO:
        """``fetch_log_segment`` from memory alone, for a read on the event loop: its stream
        raises ``RemoteReadNeedsStoreError`` as soon as it reaches a chunk that is not in a
        chunk cache in memory, and so does this call for a segment whose manifest is not
        cached or that was copied in the plain format. The chunks read are appended to
        ``hits`` (uncounted: see ``ChunkFetcher.cached_chunk_part``)."""
        check_positions(start_position, None)
        readable = self.cached_readable_segment(remote_log_segment_metadata)
        fetcher = self.fetcher
        return self._chunk_stream(
            readable,
            start_position,
            None,
            lambda readable, chunk, first, last: fetcher.cached_chunk_part(
                readable, chunk, first, last, hits
            ),
        )

    def cached_readable_segment(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> ReadableSegment:
        """The segment's cached manifest; ``RemoteReadNeedsStoreError`` when it is not cached
        or the segment is in the plain format (its bytes are the store's)."""
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        key = str(segment.segment_id)
        with self._lock:
            readable = self._readable.get(key)
            if readable is not None:
                self._readable.move_to_end(key)
        if readable is None:
            raise RemoteReadNeedsStoreError(f"remote segment {segment}: no cached manifest")
        return readable

    def _chunk_stream(
        self,
        readable: ReadableSegment,
        start_position: int,
        end_position: int | None,
        load: Callable[[ReadableSegment, Chunk, int, int], memoryview],
    ) -> BinaryIO:
        index = readable.manifest.chunk_index
        segment = readable.segment
        try:
            chunks = index.chunks_for_range(start_position, end_position)
        except ValueError as exc:
            raise RemoteStorageError(f"{segment}: {exc}") from None
        if not chunks:
            return io.BytesIO(b"")
        last = index.original_size - 1 if end_position is None else end_position
        return io.BufferedReader(
            ChunkStream(
                chunks,
                lambda chunk, first, last: load(readable, chunk, first, last),
                start=start_position,
                end=min(last, index.original_size - 1),
            )
        )

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> BinaryIO:
        readable = self._readable_segment(remote_log_segment_metadata)
        if readable is None:
            return self.store.fetch_index(remote_log_segment_metadata, index_type)
        name = RemoteObjectSuffix.for_index(index_type).value
        segment = readable.segment
        digest = readable.manifest.objects.get(name)
        closing = b""
        if index_type is IndexType.TRANSACTION and readable.manifest.segment is not None:
            # A restored log's last segment: the aborts whose markers were never copied.
            closing = b"".join(t.to_bytes() for t in readable.manifest.segment.closing_aborts())
        if digest is None:
            if closing:
                return io.BytesIO(closing)
            raise RemoteResourceNotFoundError(f"remote segment {segment} has no .{name} object")
        try:
            stream = self.store.fetch_index(remote_log_segment_metadata, index_type)
        except RemoteResourceNotFoundError as exc:
            if index_type not in _ABSENT_MEANS_EMPTY:
                raise
            # Readers take a missing one for "no aborted transactions", "no producers"; the
            # manifest lists it, so the segment is damaged instead.
            raise ChunkIntegrityError(
                f"remote segment {segment} .{name}: the manifest lists the object and the"
                f" store does not have it ({exc}): the segment is damaged"
            ) from exc
        with stream:
            content = stream.read()
        restored = readable.transform.restore_object(
            name, content, checksum=digest.checksum, where=f"remote segment {segment} .{name}"
        )
        return io.BytesIO(restored + closing)

    def segment_manifest(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> SegmentManifest | None:
        """The segment's manifest, or ``None`` for a segment in the plain format."""
        readable = self._readable_segment(remote_log_segment_metadata)
        return None if readable is None else readable.manifest

    def _readable_segment(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> ReadableSegment | None:
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        key = str(segment.segment_id)
        with self._lock:
            if key in self._readable:
                self._readable.move_to_end(key)
                return self._readable[key]
        content = self.store.fetch_segment_manifest(remote_log_segment_metadata)
        readable = None
        if content is None:
            custom_metadata = getattr(remote_log_segment_metadata, "custom_metadata", None)
            if chunked_format_version(custom_metadata) is not None:
                # Not a plain segment: its chunks would be served as records.
                raise SegmentManifestError(
                    f"remote segment {segment} was copied in the chunked format (its metadata"
                    " says so) and its manifest object is missing: its bytes are not served"
                )
        else:
            manifest = SegmentManifest.from_bytes(
                content, where=f"of remote segment {segment}", describe=False
            )
            transform = self._transform_of(manifest, segment)
            readable = ReadableSegment(remote_log_segment_metadata, segment, manifest, transform)
        self._remember(key, readable)
        return readable

    def _transform_of(self, manifest: SegmentManifest, segment: RemoteSegmentRef) -> ChunkTransform:
        encryption = None
        if manifest.encryption is not None:
            ring = self.config.key_ring
            if ring is None:
                raise MissingEncryptionKeyError(
                    f"remote segment {segment} is encrypted with a data key wrapped by key pair"
                    f" {manifest.encryption.wrapped_data_key.key_id!r} and no key ring is"
                    " configured (rsm.config.encryption.key.pairs)"
                )
            data_key = ring.unwrap(manifest.encryption.wrapped_data_key, segment=str(segment))
            encryption = SegmentEncryption(data_key, manifest.encryption.aad)
        return ChunkTransform(compression=manifest.compression, encryption=encryption)

    def _remember(self, key: str, readable: ReadableSegment | None) -> None:
        with self._lock:
            self._readable[key] = readable
            self._readable.move_to_end(key)
            while len(self._readable) > MANIFEST_CACHE_ENTRIES:
                self._readable.popitem(last=False)

    # -- delete, list, close ------------------------------------------------------------------

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        self.store.delete_log_segment_data(remote_log_segment_metadata)
        segment = RemoteSegmentRef.of(remote_log_segment_metadata)
        with self._lock:
            self._readable.pop(str(segment.segment_id), None)
        self.fetcher.cache.remove_segment(str(segment.segment_id))

    @property
    def prefix(self) -> str:
        return remote_object_store(self.store, "the key prefix").prefix

    def list_objects(self, prefix: str | None = None) -> Iterator[RemoteObjectInfo]:
        return remote_object_store(self.store, "listing objects").list_objects(prefix)

    def delete_objects(self, keys: Sequence[str]) -> None:
        remote_object_store(self.store, "deleting objects by key").delete_objects(keys)

    def put_object(self, key: str, data: bytes) -> None:
        remote_object_store(self.store, "writing an object by key").put_object(key, data)

    def get_object(self, key: str) -> bytes:
        return remote_object_store(self.store, "reading an object by key").get_object(key)

    def close(self) -> None:
        self.fetcher.close()
        self.store.close()


def _chunk_cache(config: ChunkCacheConfig) -> ChunkCache:
    if config.kind == "disk":
        assert config.path is not None
        return DiskChunkCache(
            config.path, max_bytes=config.size_bytes, retention_ms=config.retention_ms
        )
    return MemoryChunkCache(max_bytes=config.size_bytes, retention_ms=config.retention_ms)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RemoteStorageError(f"cannot read {path} to copy it: {exc}") from exc


def _write_chunks(
    source: Path, target: Path, transform: ChunkTransform, *, chunk_size: int, frame_size: int
) -> tuple[Path, ChunkIndex]:
    """The stored ``.log`` (``source`` itself when the transformation is the identity) and
    its chunk index."""
    stored_sizes: list[int] = []
    checksums: list[int] = []
    original_size = 0
    try:
        with (
            open(source, "rb") as file,
            contextlib.nullcontext() if transform.is_identity else open(target, "wb") as out,
        ):
            for chunk_id in itertools.count():
                chunk = file.read(chunk_size)
                if not chunk:
                    break
                for number, start in enumerate(range(0, len(chunk), frame_size)):
                    content = transform.transform_frame(
                        frame_context(chunk_id, number, framed=True),
                        chunk[start : start + frame_size],
                    )
                    stored_sizes.append(len(content))
                    checksums.append(checksum_of(content))
                    if out is not None:
                        out.write(content)
                original_size += len(chunk)
    except OSError as exc:
        raise RemoteStorageError(f"cannot cut {source} into chunks: {exc}") from exc
    index = ChunkIndex(
        chunk_size=chunk_size,
        frame_size=frame_size,
        framed=True,
        original_size=original_size,
        stored_sizes=tuple(stored_sizes),
        checksums=tuple(checksums),
    )
    return (source if transform.is_identity else target), index


def _describe(
    metadata: RemoteLogSegmentMetadataLike,
    leader_epoch_index: bytes,
    *,
    aborted_past_end: tuple[AbortedTxn, ...] | None,
) -> SegmentDescription | None:
    """The manifest's ``segment`` section: the metadata the copy started with, the
    partition's leader epochs up to the segment's end and the aborts running past it (none
    for a bare segment reference, which only tests and tools hand over)."""
    if not isinstance(metadata, RemoteLogSegmentMetadata):
        return None
    entries = parse_leader_epoch_checkpoint(
        leader_epoch_index, source=f"the leader epochs of {metadata.remote_log_segment_id}"
    )
    return SegmentDescription(
        metadata=metadata, leader_epochs=tuple(entries), aborted_past_end=aborted_past_end
    )
