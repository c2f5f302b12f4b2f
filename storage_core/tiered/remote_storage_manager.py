"""The remote storage manager interface (Kafka's ``RemoteStorageManager``, KIP-405).

A remote storage manager (RSM) stores the files of closed log segments in a remote store and
reads them back. It knows nothing about metadata: which segments exist, their states and
offsets are the business of the ``RemoteLogMetadataManager``. Every call names the segment by
its ``RemoteLogSegmentMetadata`` (here: anything with the attributes of
``RemoteLogSegmentMetadataLike``), and the objects of one segment live under that segment's
``RemoteLogSegmentId`` (a fresh ``Uuid`` per copy attempt), so two copies of the same local
segment never overwrite each other.

Per segment the RSM stores (see ``remote_object_keys`` for the object names)::

    .log                      the segment's records
    .index / .timeindex       its offset and time indexes
    .snapshot                 the producer snapshot at the segment's end (when present)
    .txnindex                 the aborted-transaction index (when present)
    leader-epoch-checkpoint   the leader-epoch entries up to the segment's end
    rsm-manifest              the segment manifest of the chunked format (written last, when
                              given: ``storage_core.tiered.chunked``)

Contract (as in Kafka):
- ``copy_log_segment_data`` and ``delete_log_segment_data`` are idempotent: running either
  again, after success or after a partial failure, converges to the same state. A failed copy
  may leave some objects behind; the caller deletes them (COPY_SEGMENT_STARTED ->
  DELETE_SEGMENT_STARTED).
- ``fetch_log_segment`` reads bytes ``[start_position, end_position]`` (both inclusive) of the
  ``.log`` object; without ``end_position`` up to the end of the object.
- A missing object raises ``RemoteResourceNotFoundError``; anything else that goes wrong with
  the store raises ``RemoteStorageError``.
- Implementations are safe to use from several threads at once.

Kafka's interface has no listing. The jobs that look at the whole store (``reconcile``,
``quality``) and delete objects no metadata names (orphans) need one more small interface,
``RemoteObjectStore``, which ``LocalTieredStorage`` and ``S3RemoteStorageManager`` both
implement: ``list_objects`` (every object under the key prefix, in key order) and
``delete_objects`` (objects by key). ``delete_objects`` checks every key before it deletes
any: a key that is not an object of the remote tier's layout under the store's key prefix
(``remote_object_keys``) raises ``InvalidRemoteObjectKeyError`` and nothing is deleted. A
store that can not be reached raises ``RemoteStorageError`` naming the store and the endpoint;
a listing is never returned partial.

``RemoteObjectStore`` also writes and reads small whole objects by key, for what makes the
bucket enough to restore topics (``storage_core.tiered.recovery``): ``put_object`` (atomic: a
reader sees the old object or the new one whole) and ``get_object`` (``RemoteResourceNotFoundError``
when absent). They accept only the keys of a topic manifest or a consumer offsets backup
(``remote_object_keys.check_bucket_manifest_key``), so they never write a segment's object;
``delete_objects`` deletes offsets backups too, never a topic manifest.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, ClassVar, Protocol, runtime_checkable

from storage_core.common import TopicIdPartition, TopicPartition, Uuid, validate_topic_name
from storage_core.errors import InvalidConfigError, KafkaStorageError
from storage_core.log.transaction_index import AbortedTxn

# Broker settings passed to the remote storage manager start with this (Kafka's
# remote.log.storage.manager.impl.prefix default).
RSM_CONFIG_PREFIX = "rsm.config."


class RefusedRemoteStorageConfigError(InvalidConfigError):
    """``rsm.config.*`` settings the broker refuses to start with (rather than run without
    tiered storage): what they ask for would not be honoured, e.g. encryption without a
    usable key ring."""


class UnknownRemoteStorageConfigError(RefusedRemoteStorageConfigError):
    """``rsm.config.*`` settings that the remote storage manager does not read. Such a key
    would otherwise be ignored without a word (``rsm.config.encryption.enabled=true`` on a
    manager that has no encryption writes plaintext), so the manager is not built and a
    broker refuses to start."""


def refuse_unknown_rsm_config(
    manager: str, config: Mapping[str, str], known: frozenset[str]
) -> None:
    """Raise ``UnknownRemoteStorageConfigError`` naming every key of ``config`` (with or
    without the ``rsm.config.`` prefix) that is not one of ``known`` (without the prefix)."""
    unknown = sorted(
        key
        for key in config
        if (key[len(RSM_CONFIG_PREFIX) :] if key.startswith(RSM_CONFIG_PREFIX) else key)
        not in known
    )
    if unknown:
        reads = ", ".join(RSM_CONFIG_PREFIX + key for key in sorted(known))
        raise UnknownRemoteStorageConfigError(
            f"{manager} does not know the setting(s) {', '.join(unknown)}: remove them or"
            f" correct their names (it reads {reads})"
        )


class RemoteStorageError(KafkaStorageError):
    """The remote store failed an operation (unreachable, refused, or returned bad data).

    The message names the store (bucket/directory), the object key and the endpoint. The
    operation may be retried later; a copy that failed must be cleaned up with
    ``delete_log_segment_data``.
    """

    error_code: ClassVar[str] = "kafka_storage_error"


class RemoteReadNeedsStoreError(Exception):
    """A read asked to answer from memory alone (on the event loop) would have to go to the
    store, or wait for a thread that does: it runs on a remote reader thread instead. Not a
    failure, and never a client's error."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The requested remote object does not exist (e.g. a segment without a transaction index,
    or a segment already deleted)."""

    error_code: ClassVar[str] = "kafka_storage_error"


# A readable binary stream returned by the fetch calls; the caller closes it. ``read`` raises
# ``RemoteStorageError`` if the store fails mid-stream or the data ends before the length the
# store announced.
RemoteStream = BinaryIO


class IndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType``: the per-segment files besides the ``.log``."""

    OFFSET = "OFFSET"
    TIMESTAMP = "TIMESTAMP"
    PRODUCER_SNAPSHOT = "PRODUCER_SNAPSHOT"
    TRANSACTION = "TRANSACTION"
    LEADER_EPOCH = "LEADER_EPOCH"


class RemoteLogSegmentIdLike(Protocol):
    """What an RSM reads from Kafka's ``RemoteLogSegmentId``."""

    @property
    def topic_id_partition(self) -> TopicIdPartition: ...

    @property
    def id(self) -> Uuid: ...


class RemoteLogSegmentMetadataLike(Protocol):
    """What an RSM reads from Kafka's ``RemoteLogSegmentMetadata``."""

    @property
    def remote_log_segment_id(self) -> RemoteLogSegmentIdLike: ...

    @property
    def start_offset(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSegmentId:
    """A minimal ``RemoteLogSegmentId``: the partition and the id of one copy of a segment."""

    topic_id_partition: TopicIdPartition
    id: Uuid


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSegmentRef:
    """Everything an RSM needs to name the objects of one remote segment.

    Satisfies ``RemoteLogSegmentMetadataLike``; ``RemoteSegmentRef.of(metadata)`` turns any
    such object (e.g. a ``RemoteLogSegmentMetadata``) into one, validating it.
    """

    topic: str
    topic_id: Uuid
    partition: int
    segment_id: Uuid
    start_offset: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if self.start_offset < 0:
            raise ValueError(f"start offset must be >= 0, got {self.start_offset}")

    @staticmethod
    def of(metadata: RemoteLogSegmentMetadataLike) -> RemoteSegmentRef:
        if isinstance(metadata, RemoteSegmentRef):
            return metadata
        segment_id = metadata.remote_log_segment_id
        tp = segment_id.topic_id_partition
        return RemoteSegmentRef(
            topic=tp.topic_partition.topic,
            topic_id=tp.topic_id,
            partition=tp.topic_partition.partition,
            segment_id=segment_id.id,
            start_offset=metadata.start_offset,
        )

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, TopicPartition(self.topic, self.partition))

    @property
    def remote_log_segment_id(self) -> RemoteSegmentId:
        return RemoteSegmentId(topic_id_partition=self.topic_id_partition, id=self.segment_id)

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition} segment {self.segment_id}"
            f" (start offset {self.start_offset})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSegmentData:
    """Kafka's ``LogSegmentData``: the local files of one closed segment to copy.

    ``producer_snapshot`` is the snapshot whose offset is the next segment's base offset
    (``None`` when the log has none); ``transaction_index`` is ``None`` when the segment has
    no aborted transactions; ``leader_epoch_index`` is the content of a
    ``leader-epoch-checkpoint`` file holding the entries up to the segment's end;
    ``segment_manifest`` (the chunked format's manifest) is stored after every other object.
    ``aborted_txns_past_end``: the aborted transactions with records in the segment whose
    markers lie beyond its end (``LogView.aborted_txns_past``), for the chunked manifest;
    ``None`` when not known (a segment rewritten from the tier).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    producer_snapshot: Path | None = None
    transaction_index: Path | None = None
    leader_epoch_index: bytes = field(default=b"", repr=False)
    segment_manifest: bytes | None = field(default=None, repr=False)
    aborted_txns_past_end: tuple[AbortedTxn, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index"):
            if not isinstance(getattr(self, name), Path):
                raise TypeError(f"LogSegmentData.{name} must be a Path")


@runtime_checkable
class RemoteStorageManager(Protocol):
    """Kafka's ``RemoteStorageManager``; the contract is in the module docstring."""

    def copy_log_segment_data(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        log_segment_data: LogSegmentData,
    ) -> bytes | None:
        """Copy every file of the segment; returns custom metadata (Kafka's
        ``CustomMetadata`` value) to store with the segment's metadata, or ``None``."""
        ...

    def fetch_log_segment(
        self,
        remote_log_segment_metadata: RemoteLogSegmentMetadataLike,
        start_position: int,
        end_position: int | None = None,
    ) -> RemoteStream:
        """Bytes ``[start_position, end_position]`` (inclusive) of the ``.log``."""
        ...

    def fetch_index(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike, index_type: IndexType
    ) -> RemoteStream:
        """The whole index file of ``index_type``."""
        ...

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        """Delete every object of the segment; objects already gone are fine."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class SegmentManifestStore(Protocol):
    """A store that keeps a segment manifest object beside a segment's other objects."""

    def fetch_segment_manifest(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> bytes | None:
        """The segment's manifest, or ``None`` when it has none (copied in the plain format)."""
        ...


def check_positions(start_position: int, end_position: int | None) -> None:
    """``ValueError`` unless ``0 <= start_position <= end_position`` (when given)."""
    if start_position < 0:
        raise ValueError(f"start position must be >= 0, got {start_position}")
    if end_position is not None and end_position < start_position:
        raise ValueError(
            f"end position (inclusive) {end_position} is below start position {start_position}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteObjectInfo:
    """One object found by ``list_objects`` (for the reconcile job): its full key, its size
    and when it was last written (ms since the epoch)."""

    key: str
    size_bytes: int
    last_modified_ms: int


@runtime_checkable
class RemoteObjectStore(Protocol):
    """Listing and deleting a remote store's objects by key (module docstring); keys are the
    full object keys of ``remote_object_keys``, prefix included."""

    @property
    def prefix(self) -> str:
        """The key prefix, without leading or trailing ``/`` (empty: none)."""
        ...

    def list_objects(self, prefix: str | None = None) -> Iterator[RemoteObjectInfo]:
        """Every complete object whose key starts with ``prefix`` (default: the store's key
        prefix), in key order. Raises ``RemoteStorageError`` rather than end early."""
        ...

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete the objects ``keys``; keys already gone are fine. Every key is checked
        first: one that is not an object of the remote tier (or an offsets backup) under
        ``prefix`` raises ``InvalidRemoteObjectKeyError`` and nothing is deleted."""
        ...

    def put_object(self, key: str, data: bytes) -> None:
        """Write ``data`` as the whole object ``key`` (a topic manifest or an offsets backup
        key, else ``InvalidRemoteObjectKeyError``); readers see the old object or the new one
        whole, never a part."""
        ...

    def get_object(self, key: str) -> bytes:
        """The whole object ``key`` (a topic manifest or an offsets backup key, else
        ``InvalidRemoteObjectKeyError``); ``RemoteResourceNotFoundError`` when absent."""
        ...


class RemoteObjectStoreNotSupportedError(RemoteStorageError):
    """The configured remote storage manager can not list its objects or delete them by key
    (it does not implement ``RemoteObjectStore``)."""

    error_code: ClassVar[str] = "kafka_storage_error"


def remote_object_store(rsm: RemoteStorageManager, purpose: str) -> RemoteObjectStore:
    """``rsm`` as a ``RemoteObjectStore``; ``RemoteObjectStoreNotSupportedError`` naming
    ``purpose`` (what needed it) when it is not one."""
    if isinstance(rsm, RemoteObjectStore):
        return rsm
    raise RemoteObjectStoreNotSupportedError(
        f"{purpose} needs a remote storage manager that lists its objects and deletes them by"
        " key (RemoteObjectStore: list_objects, delete_objects, put_object, get_object,"
        f" prefix); {rsm!r} is not one:"
        " configure LocalTieredStorage or S3RemoteStorageManager"
    )


def check_restore_target(source: RemoteSegmentRef, target: RemoteSegmentRef) -> None:
    """A restore copies objects to another topic id's keys only: it never writes over an
    object of the source (``ValueError`` otherwise)."""
    if target.topic_id == source.topic_id:
        raise ValueError(
            f"a restore writes the objects of {source} to another topic id, not to {target}"
        )
