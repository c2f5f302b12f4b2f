"""What the bucket holds of each partition, read from the segment manifests alone.

A restore can not ask ``__remote_log_metadata`` (the cluster that wrote it may be gone): it
lists the objects under the store's prefix and reads each segment's ``rsm-manifest``, whose
``segment`` section carries the segment's metadata in Kafka's serde and the partition's
leader epochs up to its end (``storage_core.tiered.chunked.segment_manifest``). Nothing is
taken from the bucket without its manifest checked against the objects:

- the manifest parses, is of a format version this reader knows, and names the segment its
  key names (a manifest copied beside another segment's objects is not believed);
- every object it lists is there with the size it lists (the ``.log``: its chunks' stored
  sizes); with ``verify_checksums`` each object is also read and its CRC32C compared;
- objects without a manifest (copied in the plain format before manifests existed, or left
  by a deletion cut short: the manifest goes first) are counted, never read.

A segment failing a check is kept with its problems named (``BucketSegment.problems``): the
restore planner leaves it out and says why.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from storage_core.common import TopicIdPartition, Uuid
from storage_core.errors import InvalidConfigError
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.tiered.chunked.chunk_transform import checksum_of
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.chunked.custom_metadata import encode_custom_metadata
from storage_core.tiered.chunked.errors import SegmentManifestError
from storage_core.tiered.chunked.segment_manifest import SegmentManifest
from storage_core.tiered.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
    segment_key,
)
from storage_core.tiered.remote_storage_manager import (
    IndexType,
    RemoteObjectInfo,
    RemoteObjectStore,
    RemoteSegmentRef,
    RemoteStorageManager,
    SegmentManifestStore,
)


@runtime_checkable
class BucketStore(RemoteStorageManager, RemoteObjectStore, SegmentManifestStore, Protocol):
    """A store that lists its objects, reads segment manifests, serves objects as stored and
    copies a segment's objects for a restore (both stores; not the chunked manager wrapping
    them, which serves them restored)."""

    def restore_segment_objects(
        self,
        source: RemoteSegmentRef,
        target: RemoteSegmentRef,
        suffixes: Sequence[RemoteObjectSuffix],
        manifest: bytes,
    ) -> int:
        """Copy ``source``'s objects ``suffixes``, as stored, to ``target``'s keys (a segment
        of another topic id: ``check_restore_target``), then write ``manifest`` as
        ``target``'s, last; the bytes now stored under ``target``. Idempotent: a copy cut
        short is done again whole."""
        ...


def bucket_store(rsm: RemoteStorageManager) -> BucketStore:
    """The store under the chunked format (the objects as stored, manifests included);
    ``InvalidConfigError`` for a remote storage manager that cannot list them."""
    store = rsm.store if isinstance(rsm, ChunkedRemoteStorageManager) else rsm
    if not isinstance(store, BucketStore):
        raise InvalidConfigError(
            f"reading the bucket back needs its objects and manifests: {type(store).__name__}"
            " cannot list them (configure LocalTieredStorage or S3RemoteStorageManager)"
        )
    return store


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketSegment:
    """One segment found in the bucket with its manifest."""

    ref: RemoteSegmentRef
    manifest: SegmentManifest | None  # None when the manifest could not be read
    stored_bytes: int  # every object of the segment, its manifest included
    problems: tuple[str, ...] = ()

    @property
    def metadata(self) -> RemoteLogSegmentMetadata:
        """The segment as its manifest describes it (only for a segment without problems)."""
        if self.manifest is None or self.manifest.segment is None:
            raise ValueError(f"segment {self.ref} has no readable description")
        return self.manifest.segment.metadata

    @property
    def leader_epochs(self) -> tuple[EpochEntry, ...]:
        if self.manifest is None or self.manifest.segment is None:
            raise ValueError(f"segment {self.ref} has no readable description")
        return self.manifest.segment.leader_epochs

    def custom_metadata(self) -> bytes:
        """The custom metadata the chunked copy returned: the stored size of its objects and
        the format version (what its COPY_SEGMENT_FINISHED update carried)."""
        assert self.manifest is not None
        return encode_custom_metadata(
            remote_size=self.stored_bytes, format_version=self.manifest.version
        )


@dataclass(slots=True)
class PartitionInBucket:
    """Every segment of one partition (one topic id) found in the bucket."""

    topic_id_partition: TopicIdPartition
    segments: list[BucketSegment] = field(default_factory=list)
    without_manifest: list[RemoteSegmentRef] = field(default_factory=list)

    @property
    def readable(self) -> list[BucketSegment]:
        return [s for s in self.segments if not s.problems]


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketInventory:
    partitions: Mapping[TopicIdPartition, PartitionInBucket]

    def topics(self) -> dict[tuple[str, Uuid], list[int]]:
        """(topic name, topic id) -> its partitions found, sorted."""
        found: dict[tuple[str, Uuid], list[int]] = defaultdict(list)
        for tip in self.partitions:
            found[(tip.topic_partition.topic, tip.topic_id)].append(tip.topic_partition.partition)
        return {topic: sorted(partitions) for topic, partitions in sorted(found.items())}


def scan_bucket(
    store: BucketStore,
    *,
    topic: str | None = None,
    topic_id: Uuid | None = None,
    verify_checksums: bool = False,
) -> BucketInventory:
    """Read every segment manifest under the store's prefix (of ``topic`` / ``topic_id``
    when given) and check it against the listing."""
    listing: dict[RemoteSegmentRef, dict[RemoteObjectSuffix, RemoteObjectInfo]] = defaultdict(dict)
    for info in store.list_objects():
        try:
            parsed = parse_object_key(info.key, store.prefix)
        except InvalidRemoteObjectKeyError:
            continue  # not a segment object (a topic manifest, a backup, another tool's)
        ref = parsed.segment
        if (topic is not None and ref.topic != topic) or (
            topic_id is not None and ref.topic_id != topic_id
        ):
            continue
        listing[ref][parsed.suffix] = info
    partitions: dict[TopicIdPartition, PartitionInBucket] = {}
    for ref, objects in sorted(listing.items(), key=lambda item: _order(item[0])):
        tip = ref.topic_id_partition
        partition = partitions.setdefault(tip, PartitionInBucket(tip))
        if RemoteObjectSuffix.SEGMENT_MANIFEST not in objects:
            partition.without_manifest.append(ref)
            continue
        partition.segments.append(_checked(store, ref, objects, verify_checksums))
    return BucketInventory(partitions=partitions)


def _order(ref: RemoteSegmentRef) -> tuple[str, str, int, int, str]:
    return (ref.topic, str(ref.topic_id), ref.partition, ref.start_offset, str(ref.segment_id))


def _checked(
    store: BucketStore,
    ref: RemoteSegmentRef,
    objects: Mapping[RemoteObjectSuffix, RemoteObjectInfo],
    verify_checksums: bool,
) -> BucketSegment:
    stored_bytes = sum(info.size_bytes for info in objects.values())
    key = segment_key(store.prefix, ref, RemoteObjectSuffix.SEGMENT_MANIFEST)
    try:
        data = store.fetch_segment_manifest(ref)
        if data is None:
            raise SegmentManifestError(f"segment manifest {key} vanished while it was read")
        manifest = SegmentManifest.from_bytes(data, where=key)
    except SegmentManifestError as exc:
        return BucketSegment(
            ref=ref, manifest=None, stored_bytes=stored_bytes, problems=(str(exc),)
        )
    problems = list(_description_problems(ref, manifest, key))
    problems += _object_problems(ref, manifest, objects)
    if verify_checksums and not problems:
        problems += _checksum_problems(store, ref, manifest)
    return BucketSegment(
        ref=ref, manifest=manifest, stored_bytes=stored_bytes, problems=tuple(problems)
    )


def _description_problems(
    ref: RemoteSegmentRef, manifest: SegmentManifest, key: str
) -> Iterator[str]:
    if manifest.segment is None:
        yield (
            f"segment manifest {key} does not describe its segment (written before manifests"
            " carried the segment's metadata): rewrite the segment (storage-core tier"
            " --rewrite) to make it restorable"
        )
        return
    metadata = manifest.segment.metadata
    segment_id = metadata.remote_log_segment_id
    described = RemoteSegmentRef(
        topic=segment_id.topic_id_partition.topic_partition.topic,
        topic_id=segment_id.topic_id_partition.topic_id,
        partition=segment_id.topic_id_partition.topic_partition.partition,
        segment_id=segment_id.id,
        start_offset=metadata.start_offset,
    )
    if described != ref:
        yield f"segment manifest {key} describes another segment ({described})"
    epochs = manifest.segment.leader_epochs
    if not epochs or epochs[-1].epoch != max(metadata.segment_leader_epochs):
        listed = [(e.epoch, e.start_offset) for e in epochs]
        yield (
            f"segment manifest {key}: its leader epochs {listed} do not end with the"
            f" segment's last epoch {max(metadata.segment_leader_epochs)}"
        )


def _object_problems(
    ref: RemoteSegmentRef,
    manifest: SegmentManifest,
    objects: Mapping[RemoteObjectSuffix, RemoteObjectInfo],
) -> Iterator[str]:
    expected = {RemoteObjectSuffix.LOG.value: manifest.chunk_index.stored_size}
    expected |= {name: digest.stored_size for name, digest in manifest.objects.items()}
    found = {suffix.value: info.size_bytes for suffix, info in objects.items()}
    for name, size in sorted(expected.items()):
        if name not in found:
            yield f"segment {ref}: its manifest lists the .{name} object, which is missing"
        elif found[name] != size:
            yield (
                f"segment {ref}: its .{name} object holds {found[name]} bytes, its manifest"
                f" says {size}"
            )


def _checksum_problems(
    store: BucketStore, ref: RemoteSegmentRef, manifest: SegmentManifest
) -> Iterator[str]:
    """Read every object whole and compare its CRC32C with the manifest's."""
    index = manifest.chunk_index
    with store.fetch_log_segment(ref, 0) as stream:
        for chunk in map(index.chunk, range(len(index))):
            for frame in chunk.frames:
                stored = stream.read(frame.stored_size)
                if len(stored) != frame.stored_size or checksum_of(stored) != frame.checksum:
                    yield f"segment {ref}: chunk {chunk.id} of its .log fails its checksum"
                    return
    for name, digest in sorted(manifest.objects.items()):
        suffix = RemoteObjectSuffix(name)
        with store.fetch_index(ref, _INDEX_TYPES[suffix]) as stream:
            content = stream.read()
        if checksum_of(content) != digest.checksum:
            yield f"segment {ref}: its .{name} object fails its checksum"


def topic_ids_named(inventory: BucketInventory, topic: str) -> list[Uuid]:
    """The incarnations (topic ids) of ``topic`` the bucket holds, in id order."""
    return sorted({tid for name, tid in inventory.topics() if name == topic}, key=str)


def segments_of(
    inventory: BucketInventory, partitions: Iterable[TopicIdPartition]
) -> dict[TopicIdPartition, PartitionInBucket]:
    return {tip: inventory.partitions[tip] for tip in partitions if tip in inventory.partitions}


_INDEX_TYPES = {RemoteObjectSuffix.for_index(index_type): index_type for index_type in IndexType}
