"""Snapshot of one partition's ``RemoteLogMetadataCache`` on disk (``remote_log_snapshot``).

With it a restarting broker resumes reading ``__remote_log_metadata`` after the offset the
snapshot covers instead of replaying the metadata partition from offset 0.

Kafka's ``RemoteLogMetadataSnapshotFile`` (version 0) is::

    version int16 (0), metadata_partition int32, metadata_partition_offset int64,
    entries_count int32, then per entry: length int32, RemoteLogMetadataSerde bytes of a
    RemoteLogSegmentMetadataSnapshotRecord (api key 3)

It has no checksum, and it does not keep the per-epoch state of the cache (which uploads
displaced which, each epoch's highest copied offset) nor the partition's deletion state, so a
cache rebuilt from it may answer differently. This module writes version 2, which keeps
Kafka's layout and record encoding and adds what is missing (all integers big-endian)::

    version                    int16   2
    crc                        uint32  CRC32C (Castagnoli) of every byte after this field
    topic_id                   16 bytes (most, least significant halves)
    partition                  int32   the user partition the snapshot belongs to
    metadata_partition         int32   the __remote_log_metadata partition read
    metadata_partition_offset  int64   last offset of it applied (inclusive); -1 for none
    entries_count              int32
    entry * entries_count      length int32, then RemoteLogMetadataSerde bytes: api key 3
                               (one per segment, by start offset) or api key 2 (at most one:
                               the partition's deletion state)
    epochs_count               int32
    epoch * epochs_count       leader_epoch int32, highest_log_offset int64 (int64 min: none),
                               referenced_count int32,
                               referenced * (start_offset int64, segment id 16 bytes)

Version 1 is the same but for ``highest_log_offset``, where -1 stood for none. -1 is also a
real value: an epoch that a segment's epoch entries open and close at the same offset ends at
``start_offset - 1``, and a cache restored from version 1 answered none for it. Version 1 is
still read, with its -1 as none.

Every length and count is checked against the bytes present, the CRC over the rest, and the
decoded state against itself (``RemoteLogMetadataCache.restore``). Any failure, an unknown
version (Kafka's version 0 included) or a snapshot of another partition raises
``CorruptRemoteLogMetadataSnapshotError``; ``maybe_restore_cache`` then falls back to
replaying the topic from offset 0. Writes are atomic: ``remote_log_snapshot.tmp``, fsync,
rename, fsync the directory. Writers of one file must not run concurrently.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage_core.atomic_file import write_file_atomically
from storage_core.common import TopicIdPartition, Uuid
from storage_core.errors import CheckpointWriteError, KafkaStorageError
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.cache import (
    CacheSnapshotState,
    EpochSnapshotState,
    RemoteLogMetadataCache,
)
from storage_core.tiered.metadata.errors import (
    CorruptRemoteLogMetadataError,
    CorruptRemoteLogMetadataSnapshotError,
)
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadataSnapshot,
    RemotePartitionDeleteMetadata,
)

logger = logging.getLogger(__name__)

REMOTE_LOG_SNAPSHOT_FILE_NAME = "remote_log_snapshot"
SNAPSHOT_VERSION = 2
# version -> what ``highest_log_offset`` holds for "no offset copied of this epoch yet"
NO_HIGHEST_OFFSET_BY_VERSION = {1: -1, 2: -(2**63)}
MAX_SNAPSHOT_BYTES = 1 << 30
"""Largest snapshot read or written, 1 GiB (inclusive): ~10 million segments."""

_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_HEADER = struct.Struct(
    ">qqiiqi"
)  # topic id (2 halves), partition, metadata partition/offset, count
_CRC_END = _VERSION.size + _CRC.size
_INT32 = struct.Struct(">i")
_EPOCH = struct.Struct(">iqi")
_REFERENCE = struct.Struct(">qqq")  # start offset, segment id halves


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A partition's cache state as of ``metadata_partition_offset`` (inclusive; -1: none)."""

    topic_id_partition: TopicIdPartition
    metadata_partition: int
    metadata_partition_offset: int
    state: CacheSnapshotState

    def __post_init__(self) -> None:
        if self.metadata_partition < 0:
            raise ValueError(f"metadata_partition must be >= 0, got {self.metadata_partition}")
        if self.metadata_partition_offset < -1:
            raise ValueError(
                f"metadata_partition_offset must be >= -1, got {self.metadata_partition_offset}"
            )


def encode_snapshot(snapshot: Snapshot) -> bytes:
    tip = snapshot.topic_id_partition
    entries = [serde.serialize(segment) for segment in snapshot.state.segments]
    if snapshot.state.partition_delete_metadata is not None:
        entries.append(serde.serialize(snapshot.state.partition_delete_metadata))
    body = bytearray(
        _HEADER.pack(
            tip.topic_id.most_significant_bits,
            tip.topic_id.least_significant_bits,
            tip.topic_partition.partition,
            snapshot.metadata_partition,
            snapshot.metadata_partition_offset,
            len(entries),
        )
    )
    for entry in entries:
        body += _INT32.pack(len(entry))
        body += entry
    body += _INT32.pack(len(snapshot.state.epochs))
    for epoch in snapshot.state.epochs:
        highest = (
            NO_HIGHEST_OFFSET_BY_VERSION[SNAPSHOT_VERSION]
            if epoch.highest_log_offset is None
            else epoch.highest_log_offset
        )
        body += _EPOCH.pack(epoch.leader_epoch, highest, len(epoch.referenced))
        for start_offset, segment_id in epoch.referenced:
            body += _REFERENCE.pack(
                start_offset, segment_id.most_significant_bits, segment_id.least_significant_bits
            )
    data = _VERSION.pack(SNAPSHOT_VERSION) + _CRC.pack(crc32c.crc32c(body)) + body
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise ValueError(f"snapshot of {tip} is {len(data)} bytes, above {MAX_SNAPSHOT_BYTES}")
    return data


class _Cursor:
    __slots__ = ("data", "file", "pos")

    def __init__(self, data: bytes, file: str) -> None:
        self.data = data
        self.file = file
        self.pos = 0

    def fail(self, reason: str) -> CorruptRemoteLogMetadataSnapshotError:
        return CorruptRemoteLogMetadataSnapshotError(
            f"remote log metadata snapshot {self.file}: {reason} (at byte {self.pos});"
            " it is discarded and the cache is rebuilt from __remote_log_metadata"
        )

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise self.fail(
                f"truncated {what}: needs {size} bytes, {len(self.data) - self.pos} left"
            )
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, layout: struct.Struct, what: str) -> tuple[int, ...]:
        values: tuple[int, ...] = layout.unpack(self.take(layout.size, what))
        return values

    def count(self, what: str, min_entry_size: int) -> int:
        (count,) = self.unpack(_INT32, what)
        if count < 0 or count * min_entry_size > len(self.data) - self.pos:
            raise self.fail(
                f"{what} {count} does not fit the {len(self.data) - self.pos} bytes left"
            )
        return count


def decode_snapshot(
    data: bytes, topic_id_partition: TopicIdPartition, *, file: str = "<bytes>"
) -> Snapshot:
    """Decode and check the bytes of ``topic_id_partition``'s snapshot file.

    Raises ``CorruptRemoteLogMetadataSnapshotError`` if they fail any check.
    """
    cursor = _Cursor(data, file)
    (version,) = cursor.unpack(_VERSION, "version")
    no_highest_offset = NO_HIGHEST_OFFSET_BY_VERSION.get(version)
    if no_highest_offset is None:
        readable = " and ".join(str(v) for v in NO_HIGHEST_OFFSET_BY_VERSION)
        raise cursor.fail(f"unsupported version {version} (versions {readable} are read)")
    (stored_crc,) = cursor.unpack(_CRC, "crc")
    computed_crc = crc32c.crc32c(memoryview(data)[_CRC_END:])
    if stored_crc != computed_crc:
        raise cursor.fail(
            f"CRC32C mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}"
        )
    most, least, partition, metadata_partition, metadata_offset, entries_count = cursor.unpack(
        _HEADER, "header"
    )
    if entries_count < 0 or entries_count * _INT32.size > len(data) - cursor.pos:
        raise cursor.fail(f"entries count {entries_count} does not fit the file")
    segments: list[RemoteLogSegmentMetadataSnapshot] = []
    delete_metadata: RemotePartitionDeleteMetadata | None = None
    for index in range(entries_count):
        (length,) = cursor.unpack(_INT32, f"length of entry {index}")
        entry = cursor.take(length, f"entry {index}")
        try:
            value = serde.deserialize(entry)
        except CorruptRemoteLogMetadataError as exc:
            raise cursor.fail(f"entry {index}: {exc}") from exc
        if isinstance(value, RemoteLogSegmentMetadataSnapshot):
            segments.append(value)
        elif isinstance(value, RemotePartitionDeleteMetadata) and delete_metadata is None:
            delete_metadata = value
        else:
            raise cursor.fail(f"entry {index} is an unexpected {type(value).__name__}")
    epochs = []
    for index in range(cursor.count("epochs count", _EPOCH.size)):
        leader_epoch, highest, referenced_count = cursor.unpack(_EPOCH, f"epoch entry {index}")
        if referenced_count < 0 or referenced_count * _REFERENCE.size > len(data) - cursor.pos:
            raise cursor.fail(f"epoch {leader_epoch} claims {referenced_count} references")
        referenced = []
        for _ in range(referenced_count):
            start_offset, id_most, id_least = cursor.unpack(_REFERENCE, "reference")
            referenced.append((start_offset, Uuid(id_most, id_least)))
        epochs.append(
            EpochSnapshotState(
                leader_epoch=leader_epoch,
                highest_log_offset=None if highest == no_highest_offset else highest,
                referenced=referenced,
            )
        )
    if cursor.pos != len(data):
        raise cursor.fail(f"{len(data) - cursor.pos} byte(s) of garbage after the snapshot")
    expected_id = topic_id_partition.topic_id
    if (most, least) != (expected_id.most_significant_bits, expected_id.least_significant_bits) or (
        partition != topic_id_partition.topic_partition.partition
    ):
        raise cursor.fail(
            f"snapshot of topic id {Uuid(most, least)} partition {partition}"
            f" found where the one of {topic_id_partition} belongs"
        )
    if delete_metadata is not None and delete_metadata.topic_id_partition != topic_id_partition:
        raise cursor.fail(f"deletion state of another partition: {delete_metadata}")
    try:
        return Snapshot(
            topic_id_partition=topic_id_partition,
            metadata_partition=metadata_partition,
            metadata_partition_offset=metadata_offset,
            state=CacheSnapshotState(
                segments=segments, epochs=epochs, partition_delete_metadata=delete_metadata
            ),
        )
    except ValueError as exc:
        raise cursor.fail(str(exc)) from exc


class RemoteLogMetadataSnapshotFile:
    """The ``remote_log_snapshot`` file of one partition in ``directory``."""

    def __init__(self, directory: Path, topic_id_partition: TopicIdPartition) -> None:
        self.path = directory / REMOTE_LOG_SNAPSHOT_FILE_NAME
        self.topic_id_partition = topic_id_partition

    def write(self, snapshot: Snapshot) -> None:
        """Replace the file with ``snapshot`` atomically.

        Raises ``CheckpointWriteError`` naming the file; the previous snapshot is then intact.
        """
        if snapshot.topic_id_partition != self.topic_id_partition:
            raise ValueError(
                f"snapshot of {snapshot.topic_id_partition} written to the file of"
                f" {self.topic_id_partition}"
            )
        data = encode_snapshot(snapshot)
        decode_snapshot(data, self.topic_id_partition, file=str(self.path))  # check before writing
        try:
            write_file_atomically(self.path, data)
        except OSError as exc:
            raise CheckpointWriteError(
                f"Error while writing remote log metadata snapshot {self.path}: {exc}"
                " (check the disk and permissions of the log dir)"
            ) from exc

    def read(self) -> Snapshot | None:
        """The stored snapshot; ``None`` if the file is missing or empty (as in Kafka).

        Raises ``CorruptRemoteLogMetadataSnapshotError`` for a damaged file and
        ``KafkaStorageError`` if it can not be read.
        """
        try:
            with open(self.path, "rb") as snapshot_file:
                data = snapshot_file.read(MAX_SNAPSHOT_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KafkaStorageError(
                f"Error while reading remote log metadata snapshot {self.path}: {exc}"
            ) from exc
        if not data:
            return None
        if len(data) > MAX_SNAPSHOT_BYTES:
            raise CorruptRemoteLogMetadataSnapshotError(
                f"remote log metadata snapshot {self.path} is larger than {MAX_SNAPSHOT_BYTES}"
                " bytes; it is discarded and the cache is rebuilt from __remote_log_metadata"
            )
        return decode_snapshot(data, self.topic_id_partition, file=str(self.path))


def snapshot_of(
    cache: RemoteLogMetadataCache, metadata_partition: int, metadata_partition_offset: int
) -> Snapshot:
    """A snapshot of ``cache`` having applied ``metadata_partition`` up to the given offset
    (inclusive)."""
    return Snapshot(
        topic_id_partition=cache.topic_id_partition,
        metadata_partition=metadata_partition,
        metadata_partition_offset=metadata_partition_offset,
        state=cache.snapshot_state(),
    )


def maybe_restore_cache(
    snapshot_file: RemoteLogMetadataSnapshotFile, metadata_partition: int
) -> tuple[RemoteLogMetadataCache, int]:
    """The partition's cache and the next ``metadata_partition`` offset to read.

    From the snapshot when there is a sound one for ``metadata_partition``; otherwise (none,
    damaged, inconsistent, or taken from another metadata partition) an empty cache and
    offset 0, so that the caller replays the topic. A damaged file is logged and left for the
    next ``write`` to replace.
    """
    tip = snapshot_file.topic_id_partition
    try:
        snapshot = snapshot_file.read()
        if snapshot is None:
            return RemoteLogMetadataCache(tip), 0
        if snapshot.metadata_partition != metadata_partition:
            logger.warning(
                "ignoring remote log metadata snapshot of another metadata partition"
                " partition=%s file=%s snapshot_metadata_partition=%d metadata_partition=%d",
                tip,
                snapshot_file.path,
                snapshot.metadata_partition,
                metadata_partition,
            )
            return RemoteLogMetadataCache(tip), 0
        cache = RemoteLogMetadataCache.restore(tip, snapshot.state)
    except (CorruptRemoteLogMetadataSnapshotError, ValueError) as exc:
        logger.error(
            "rebuilding remote log metadata from the topic partition=%s file=%s error=%s",
            tip,
            snapshot_file.path,
            exc,
        )
        return RemoteLogMetadataCache(tip), 0
    return cache, snapshot.metadata_partition_offset + 1
